package serve

import (
	"context"
	"log/slog"
	"time"
)

// Run does the service's work besides its calls until ctx is done, then
// returns nil: every Config.MissedInterval it writes the history entries
// of the calls ended periods did not make and queues the catch-up calls
// of CatchUpOne (RecordMissed), and every Config.PruneInterval it deletes
// the history older than Config.History (Prune), each once at its start
// too. River's client, configured with Configure, makes the calls; Run is
// the rest, and a process that serves the API or makes calls runs it
// beside them (riverslot serve does). Several processes on one schema may
// run it at once: each entry is written, and each catch-up queued, once.
// An error of a sweep is logged, and the next sweep tries again.
func (s *Server) Run(ctx context.Context) error {
	missed := time.NewTicker(s.cfg.MissedInterval)
	defer missed.Stop()
	prune := time.NewTicker(s.cfg.PruneInterval)
	defer prune.Stop()
	s.sweepMissed(ctx)
	s.prune(ctx)
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-missed.C:
			s.sweepMissed(ctx)
		case <-prune.C:
			s.prune(ctx)
		}
	}
}

// sweepMissed is one RecordMissed of Run, its error logged.
func (s *Server) sweepMissed(ctx context.Context) {
	if _, err := s.RecordMissed(ctx); err != nil && ctx.Err() == nil {
		s.cfg.Logger.WarnContext(ctx, "riverslot serve: recording missed calls", slog.String("error", err.Error()))
	}
}

// prune is one Prune of Run, logged.
func (s *Server) prune(ctx context.Context) {
	calls, schedules, err := s.Prune(ctx)
	switch {
	case err != nil && ctx.Err() == nil:
		s.cfg.Logger.WarnContext(ctx, "riverslot serve: pruning history", slog.String("error", err.Error()))
	case err == nil && calls+schedules > 0:
		s.cfg.Logger.InfoContext(ctx, "riverslot serve: pruned history", slog.Int64("calls", calls), slog.Int64("schedules", schedules))
	}
}
