// Package sqlbucket owns the SQL that puts accounts into buckets: the bucket
// expression on a UUID column, the sargable per-slot range predicate, its Go
// mirror, and the DDL of the expression index that makes per-slot selection
// read only the slot's rows.
//
// An account's bucket is the last byte (byte 15) of its UUID. In Postgres that
// is get_byte(uuid_send(id), 15): uuid_send returns the 16 raw bytes, so no
// text conversion is involved and the expression can be indexed:
//
//	CREATE INDEX CONCURRENTLY IF NOT EXISTS "accounts_id_riverslot_bucket_idx"
//	    ON "public"."accounts" ((get_byte(uuid_send("id"), 15)), "id");
//
// A slot is a contiguous range of buckets, so selecting a slot is a range scan
// of that index, and a keyset over (bucket, id) pages through it in index
// order:
//
//	get_byte(uuid_send("id"), 15) BETWEEN $1 AND $2
//
// The equivalent text form gives the same answer but cannot use this index
// (an index on the text expression itself would be possible, and larger):
//
//	get_byte(decode(replace("id"::text, '-', ''), 'hex'), 15) / $1 = $2
package sqlbucket
