// Package riverjob is what riverslot reads of River's job table: its name,
// spelt once, and the reads by primary key that riverslot makes of the jobs
// its ledger records as not finished.
//
//	rows, err := pool.Query(ctx, "SELECT count(*) FROM "+riverjob.QualifiedTable(schema)+" WHERE kind = $1", kind)
//	jobs, err := riverjob.ByID(ctx, pool, schema, ids) // absent: River deleted the job
package riverjob

import "github.com/riverslot/riverslot/sqlbucket"

// Table is River's job table, in River's schema.
const Table = "river_job"

// QualifiedTable returns River's job table in schema ("" for the search
// path), quoted: "schema"."river_job".
func QualifiedTable(schema string) string {
	return sqlbucket.QualifiedTable(schema, Table)
}
