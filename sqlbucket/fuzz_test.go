package sqlbucket_test

import (
	"testing"

	"github.com/google/uuid"

	"github.com/riverslot/riverslot/sqlbucket"
)

// FuzzBucketMirror checks the Go mirror against the UUID's canonical text
// form (the talk's decode(replace(id::text, '-', ”), 'hex') byte 15): the
// last two hex digits of the string.
func FuzzBucketMirror(f *testing.F) {
	f.Add([]byte("0123456789abcdef"))
	f.Add(make([]byte, 16))
	f.Add([]byte{15: 0xff})

	f.Fuzz(func(t *testing.T, raw []byte) {
		var id uuid.UUID
		copy(id[:], raw)
		s := id.String()
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
