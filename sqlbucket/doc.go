// Package sqlbucket owns the SQL that puts accounts into buckets: the bucket
// expression on a UUID column, the sargable per-slot range predicate, and the
// DDL of the expression index that makes per-slot selection read only the
// slot's rows. The Go side of the same computation is slotplan.Plan.SlotOf.
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
// A task of 65,536 buckets (slotplan.BucketsTwoByte) reads two bytes, the
// last one as the high part, through its own index (ExprFor, IndexDDLFor,
// SlotPredicateFor); its per-slot range predicate is as sargable:
//
//	CREATE INDEX CONCURRENTLY IF NOT EXISTS "accounts_id_riverslot_bucket2_idx"
//	    ON "public"."accounts" (((get_byte(uuid_send("id"), 15) * 256 + get_byte(uuid_send("id"), 14))), "id")
//	(get_byte(uuid_send("id"), 15) * 256 + get_byte(uuid_send("id"), 14)) BETWEEN $1 AND $2
//
// The talk's text form selects the same rows from the UUID's text:
//
//	get_byte(decode(replace("id"::text, '-', ''), 'hex'), 15) / $1 = $2
//
// Written this way (bucket / buckets-per-slot = slot) no index serves it, so
// every slot reads the whole table. An expression index on the text form,
// queried with a range on it, would serve it as well as this package's index
// does: riverslot bench measured the same size and per-slot selection time,
// and a slower build, since the text conversion runs for every row. The
// uuid_send form needs no text conversion at all.
package sqlbucket
