package demo

import (
	"encoding/json"
	"io"

	"github.com/riverslot/riverslot"
)

// Report is what a run measured: Summary for a run over one database,
// Shards for a sharded one.
type Report struct {
	Summary *Summary
	Shards  *ShardsSummary
	// Status is the last cycle's status, as riverslot status shows it: read
	// for the text report of a run over one database (nil with
	// Config.JSON, for shards, or when the run failed).
	Status *riverslot.TaskStatus
}

// WriteJSON prints the report as one indented JSON object.
func (r *Report) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	if r.Shards != nil {
		return enc.Encode(r.Shards)
	}
	return enc.Encode(r.Summary)
}

// WriteText prints the report's tables (not Status).
func (r *Report) WriteText(w io.Writer) error {
	if r.Shards != nil {
		return r.Shards.WriteText(w)
	}
	return r.Summary.WriteText(w)
}
