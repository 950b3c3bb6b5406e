package sqlbucket_test

import (
	"encoding/hex"
	"testing"

	"github.com/google/uuid"

	"github.com/riverslot/riverslot/sqlbucket"
)

// FuzzBucketMirror checks the Go mirror against the text form Postgres'
// uuid::text gives (the text predicate's decode(replace(id::text, '-', ”),
// 'hex') byte 15): a UUID written out by hand from the fuzzed bytes, parsed,
// must have as bucket the value of its last two hex digits.
// (TestPredicatesAgree checks the mirror against
// Postgres itself.)
func FuzzBucketMirror(f *testing.F) {
	f.Add([]byte("0123456789abcdef"))
	f.Add(make([]byte, 16))
	f.Add([]byte{15: 0xff})

	f.Fuzz(func(t *testing.T, raw []byte) {
		var b [16]byte
		copy(b[:], raw)
		h := hex.EncodeToString(b[:])
		s := h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:32]
		id, err := uuid.Parse(s)
		if err != nil {
			t.Fatalf("parsing %s: %v", s, err)
		}
		var fromText byte
		for _, c := range s[len(s)-2:] {
			fromText <<= 4
			switch {
			case c >= '0' && c <= '9':
				fromText |= byte(c - '0')
			default:
				fromText |= byte(c-'a') + 10
			}
		}
		if got := sqlbucket.Bucket(id); got != fromText {
			t.Fatalf("Bucket(%s) = %d, text form says %d", s, got, fromText)
		}
	})
}
