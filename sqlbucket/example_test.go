package sqlbucket_test

import (
	"fmt"

	"github.com/riverslot/riverslot/slotplan"
	"github.com/riverslot/riverslot/sqlbucket"
)

func ExampleIndexDDL() {
	fmt.Println(sqlbucket.IndexDDL("public", "accounts", "id"))
	// Output:
	// CREATE INDEX CONCURRENTLY IF NOT EXISTS "accounts_id_riverslot_bucket_idx" ON "public"."accounts" ((get_byte(uuid_send("id"), 15)), "id")
}

func ExampleSlotPredicate() {
	// Slot 60 of a 24h cycle (128 slots) is buckets 120..121, passed as $1 and $2.
	fmt.Println("SELECT id FROM accounts WHERE " + sqlbucket.SlotPredicate("id", 1, 2))
	// Output:
	// SELECT id FROM accounts WHERE get_byte(uuid_send("id"), 15) BETWEEN $1 AND $2
}

func ExampleSlotPredicateFor() {
	// Slot 487 of a 24h cycle with 65,536 buckets (1,024 slots) is buckets
	// 31168..31231, passed as $1 and $2.
	fmt.Println("SELECT id FROM accounts WHERE " + sqlbucket.SlotPredicateFor("id", slotplan.BucketsTwoByte, 1, 2))
	fmt.Println(sqlbucket.IndexDDLFor("public", "accounts", "id", slotplan.BucketsTwoByte))
	// Output:
	// SELECT id FROM accounts WHERE (get_byte(uuid_send("id"), 15) * 256 + get_byte(uuid_send("id"), 14)) BETWEEN $1 AND $2
	// CREATE INDEX CONCURRENTLY IF NOT EXISTS "accounts_id_riverslot_bucket2_idx" ON "public"."accounts" (((get_byte(uuid_send("id"), 15) * 256 + get_byte(uuid_send("id"), 14))), "id")
}
