package riverslot_test

import (
	"reflect"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/riverslot/riverslot"
)

// TestConfigTypesAreDeclaredHere: the types a user fills in to configure
// a task are declared in this package, so go doc shows their fields (an
// alias of an internal type showed none: "go doc finds no Limits").
func TestConfigTypesAreDeclaredHere(t *testing.T) {
	t.Parallel()
	for _, v := range []any{riverslot.Config{}, riverslot.Task{}, riverslot.UpstreamLimits{}, riverslot.UpstreamOverride{}, riverslot.UpstreamState{}} {
		typ := reflect.TypeOf(v)
		require.Equal(t, "github.com/riverslot/riverslot", typ.PkgPath(), "%s is declared in %s", typ.Name(), typ.PkgPath())
	}
}
