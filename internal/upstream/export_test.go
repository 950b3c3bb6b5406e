package upstream

// Pending is how many calls wait for the next batch of task of l's
// tables: acquires, or releases when release is set.
func (b *Batcher) Pending(l *Limiter, task string, release bool) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	if q := b.queues[batchKey{table: l.table, task: task, release: release}]; q != nil {
		return len(q.pending)
	}
	return 0
}
