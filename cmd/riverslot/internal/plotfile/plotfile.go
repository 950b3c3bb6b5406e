// Package plotfile writes the figures of riverslot's commands (plan --svg,
// status --svg) so that a reader never sees half of one.
package plotfile

import (
	"os"
	"path/filepath"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/vg"
)

// Save writes p to path, aside and then renamed: a browser or a script
// reading the file (status --watch rewrites it) never sees half of it. The
// format follows path's extension, as plot.Save does.
func Save(p *plot.Plot, w, h vg.Length, path string) error {
	tmp := filepath.Join(filepath.Dir(path), "."+filepath.Base(path)+".tmp"+filepath.Ext(path))
	if err := p.Save(w, h, tmp); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}
