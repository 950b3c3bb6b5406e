package serve

import (
	"context"
	"time"
)

// TokenReads is how many times s read the tokens from the database.
func (s *Server) TokenReads() int64 { return s.tokenSet.loads.Load() }

// RecordMissedAt is RecordMissed as of now.
func (s *Server) RecordMissedAt(ctx context.Context, now time.Time) (int64, error) {
	return s.recordMissedAt(ctx, now)
}
