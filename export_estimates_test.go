package riverslot

import "context"

// CheckStartRate runs Check's start-rate warning for the task as Check
// does, with accounts as the table's estimate (Check reads
// pg_class.reltuples): a rate of millions of accounts without making
// millions of rows.
func (s *Scheduler) CheckStartRate(ctx context.Context, task string, accounts int64) error {
	spec, err := s.spec(task)
	if err != nil {
		return err
	}
	info, err := s.Task(task)
	if err != nil {
		return err
	}
	s.checkStartRate(ctx, spec, info, accounts)
	return nil
}
