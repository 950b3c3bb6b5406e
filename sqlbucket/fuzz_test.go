package sqlbucket_test

import (
	"encoding/hex"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/riverslot/riverslot/slotplan"
)

// FuzzBucketMirror checks the Go mirror of the bucket expression
// (slotplan.Plan.SlotOf with 256 slots, one bucket each) against the UUID's
// canonical text form, which the text predicate reads:
//
//	get_byte(decode(replace(id::text, '-', ''), 'hex'), 15)
//
// The fuzzed bytes are written out by hand as a canonical UUID string and
// parsed; the mirror's slot must be the value of the string's last two hex
// digits, read by hand. The two-byte mirror (slotplan.Plan.SlotOf with
// 65,536 slots, one bucket each) must be those two digits followed by the
// two before them. (TestPredicatesAgree and TestTwoBytePredicateAgrees check
// the mirrors against Postgres itself.)
func FuzzBucketMirror(f *testing.F) {
	f.Add([]byte("0123456789abcdef"))
	f.Add(make([]byte, 16))
	f.Add([]byte{15: 0xff})
	f.Add([]byte{14: 0x01, 15: 0xfe})

	plan, err := slotplan.New(256 * time.Second)
	if err != nil {
		f.Fatal(err)
	}
	fine, err := slotplan.NewBuckets(65536*time.Second, slotplan.BucketsTwoByte)
	if err != nil || fine.BucketsPerSlot != 1 {
		f.Fatal(err, fine)
	}
	hexValue := func(digits string) int {
		v := 0
		for _, c := range digits {
			v <<= 4
			switch {
			case c >= '0' && c <= '9':
				v |= int(c - '0')
			default:
				v |= int(c-'a') + 10
			}
		}
		return v
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		var b [16]byte
		copy(b[:], raw)
		h := hex.EncodeToString(b[:])
		s := h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:32]
		id, err := uuid.Parse(s)
		if err != nil {
			t.Fatalf("parsing %s: %v", s, err)
		}
		fromText := hexValue(s[len(s)-2:])
		if got := plan.SlotOf(id); got != fromText {
			t.Fatalf("SlotOf(%s) = %d with 256 slots, text form says %d", s, got, fromText)
		}
		twoFromText := hexValue(s[len(s)-2:] + s[len(s)-4:len(s)-2])
		if got := fine.SlotOf(id); got != twoFromText {
			t.Fatalf("SlotOf(%s) = %d with 65,536 slots of one bucket, text form says %d", s, got, twoFromText)
		}
	})
}
