package upstream

import "time"

// Pruned records that this process pruned task's keys of l's tables just
// now: its decisions run no prune for an hour.
func Pruned(l *Limiter, task string) {
	pruned.mu.Lock()
	defer pruned.mu.Unlock()
	if pruned.last == nil {
		pruned.last = map[[2]string]time.Time{}
	}
	pruned.last[[2]string{l.table, task}] = time.Now()
}

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
