package sim

// ShardsResult is a strategy's figures over all a fleet's shards, each
// alike the one simulated: counts and rates times the shards; a database's
// queue and the lateness are the shard's own.
type ShardsResult struct {
	Strategy              Strategy `json:"strategy"`
	Shards                int      `json:"shards"`
	Accounts              int64    `json:"accounts"`
	JobsCompleted         int64    `json:"jobs_completed"`
	PeakQueuePerDatabase  int64    `json:"peak_queue_depth_per_database"`
	MeanQueueAllDatabases float64  `json:"mean_queue_depth_all_databases"`
	MeanStartsPerSecond   float64  `json:"mean_starts_per_second"`
	// MaxStartsPerSecond is the shards' peaks added up: an upper bound,
	// as their peaks need not coincide.
	MaxStartsPerSecond int64   `json:"max_starts_per_second_at_most"`
	LatenessP99Seconds float64 `json:"lateness_p99_seconds"`
}

// AllShards scales the results of the one shard simulated to shards alike
// (nil for one shard).
func AllShards(results []*Result, shards int) []ShardsResult {
	if shards <= 1 {
		return nil
	}
	n := int64(shards)
	out := make([]ShardsResult, len(results))
	for i, r := range results {
		out[i] = ShardsResult{
			Strategy: r.Strategy, Shards: shards, Accounts: int64(r.Accounts) * n, JobsCompleted: r.JobsCompleted * n,
			PeakQueuePerDatabase: r.PeakQueueDepth, MeanQueueAllDatabases: r.MeanQueueDepth * float64(n),
			MeanStartsPerSecond: r.MeanStartsPerSecond * float64(n), MaxStartsPerSecond: r.MaxStartsPerSecond * n,
			LatenessP99Seconds: r.LatenessP99Seconds,
		}
	}
	return out
}
