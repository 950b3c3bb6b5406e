package riverslot

import (
	"log/slog"
)

// TaskNames returns the names of the scheduler's tasks, in the order of
// Config.Tasks.
func (s *Scheduler) TaskNames() []string {
	names := make([]string, len(s.specs))
	for i, spec := range s.specs {
		names[i] = spec.Name
	}
	return names
}

// Shard returns the shard this scheduler's database is (Config.Shard; ""
// when not sharded).
func (s *Scheduler) Shard() string { return s.shard }

// Configured reports whether Configure has run: Status, Cycles, Account and
// the other reads need River's schema (river.Config.Schema), which
// Configure records.
func (s *Scheduler) Configured() bool { return s.configured }

// Logger returns the logger the scheduler logs to: Config.Logger, else,
// once Configure has run, the river.Config's Logger, else slog.Default().
func (s *Scheduler) Logger() *slog.Logger { return s.log() }
