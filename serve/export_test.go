package serve

// TokenReads is how many times s read the tokens from the database.
func (s *Server) TokenReads() int64 { return s.tokenSet.loads.Load() }
