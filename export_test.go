package riverslot

// SetBudgetSampleRows sets the table size above which Check samples the
// accounts table for its upstream budget, until the returned func runs.
func SetBudgetSampleRows(n float64) (restore func()) {
	old := budgetSampleRows
	budgetSampleRows = n
	return func() { budgetSampleRows = old }
}
