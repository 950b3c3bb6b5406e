package upstreamcmd

import (
	"testing"

	"github.com/riverslot/riverslot/internal/testkit/riverslottest"
)

func TestMain(m *testing.M) { riverslottest.RunTests(m) }
