package main

import (
	"flag"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/riverslot/riverslot/cmd/riverslot/internal/sim"
)

// demoUpstreamOptions are the demo's --upstream* flags.
type demoUpstreamOptions struct {
	count       int
	rate        float64
	burst       int
	concurrency int
	down        string // KEY:FROM-TO, fractions of the cycle
	downKey     string
	downFrom    float64
	downTo      float64
}

func addDemoUpstreamFlags(fs *flag.FlagSet, o *demoUpstreamOptions) {
	fs.IntVar(&o.count, "upstreams", 0, "spread the accounts over this many upstreams (bank-00, bank-01, ...) of uneven size (bank-k gets a share in 1/(k+1)), each a path of an HTTP server the demo runs on 127.0.0.1 that its syncs call; 0: none")
	fs.Float64Var(&o.rate, "upstream-rate", 0, "each upstream's Limits.Rate: calls started per second (0: none)")
	fs.IntVar(&o.burst, "upstream-burst", 0, "each upstream's Limits.Burst (default 1 with --upstream-rate)")
	fs.IntVar(&o.concurrency, "upstream-concurrency", 0, "each upstream's Limits.Concurrency: calls in flight (0: none)")
	fs.StringVar(&o.down, "upstream-down", "", "KEY:FROM-TO: the upstream KEY answers 503 from FROM to TO (fractions of each cycle), e.g. bank-03:0.2-0.6")
}

// check validates the flags.
func (o *demoUpstreamOptions) check() error {
	switch {
	case o.count < 0 || o.count > 1000:
		return usageErr("--upstreams must be 0 (none) to 1000, got %d", o.count)
	case o.rate < 0 || math.IsNaN(o.rate) || math.IsInf(o.rate, 0):
		return usageErr("--upstream-rate must be a finite number of calls per second, 0 for none, got %v", o.rate)
	case o.burst < 0:
		return usageErr("--upstream-burst must be 0 or more, got %d", o.burst)
	case o.concurrency < 0:
		return usageErr("--upstream-concurrency must be 0 (none) or more, got %d", o.concurrency)
	case o.count == 0 && (o.rate != 0 || o.burst != 0 || o.concurrency != 0 || o.down != ""):
		return usageErr("--upstream-rate, --upstream-burst, --upstream-concurrency and --upstream-down need --upstreams")
	}
	if o.down == "" {
		return nil
	}
	key, span, ok := strings.Cut(o.down, ":")
	from, to, ok2 := strings.Cut(span, "-")
	var err1, err2 error
	if ok && ok2 {
		o.downFrom, err1 = strconv.ParseFloat(from, 64)
		o.downTo, err2 = strconv.ParseFloat(to, 64)
	}
	if !ok || !ok2 || err1 != nil || err2 != nil || !(o.downFrom >= 0 && o.downFrom < o.downTo && o.downTo <= 1) {
		return usageErr("--upstream-down must be KEY:FROM-TO with 0 <= FROM < TO <= 1 (fractions of the cycle), e.g. bank-03:0.2-0.6, got %q", o.down)
	}
	if !slices.Contains(o.keys(), key) {
		return usageErr("--upstream-down: no upstream %q among the %d of --upstreams (bank-00 to %s)", key, o.count, o.keys()[o.count-1])
	}
	o.downKey = key
	return nil
}

// keys are the upstreams' names.
func (o *demoUpstreamOptions) keys() []string {
	out := make([]string, o.count)
	for i := range out {
		out[i] = sim.BankKey(i)
	}
	return out
}

// simUpstreams is the flags as the simulator and the demo take them.
func (o *demoUpstreamOptions) simUpstreams() sim.Upstreams {
	u := sim.Upstreams{Count: o.count, Rate: o.rate, Burst: o.burst, Concurrency: o.concurrency}
	if o.downKey != "" {
		u.Down = &sim.Down{Bank: slices.Index(o.keys(), o.downKey), From: o.downFrom, To: o.downTo}
	}
	return u
}
