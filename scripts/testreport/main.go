// Command testreport reads `go test -json` on stdin and prints what a person
// needs from a long run: each package's result as it finishes, the whole
// output of every failed test (and of packages that did not build), and at
// the end the slowest tests and packages, so the next change that slows the
// suite shows. It exits 1 when anything failed.
//
//	go test -json ./... | go run ./scripts/testreport -slowest 15
//
// scripts/test.sh runs several go test commands at once: each one's stream
// goes through a live report (-summary=false -failures=false: package results
// as they finish), and their files through one final report at the end
// (-packages=false: the failed tests' output and the slowest).
package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"
)

// event is one line of `go test -json` (see `go doc test2json`).
type event struct {
	Action     string
	Package    string
	Test       string
	Elapsed    float64
	Output     string
	ImportPath string
}

type timing struct {
	name    string
	elapsed time.Duration
}

func main() {
	var o options
	flag.IntVar(&o.slowest, "slowest", 15, "how many of the slowest tests to list at the end")
	packages := flag.Bool("packages", true, "print each package's result and build output as it comes")
	failures := flag.Bool("failures", true, "print the whole output of each failed test")
	summary := flag.Bool("summary", true, "print the skipped tests and the slowest tests and packages at the end")
	flag.Parse()
	o.quietPackages, o.quietFailures, o.quietSummary = !*packages, !*failures, !*summary
	failed, err := report(os.Stdin, os.Stdout, o)
	if err != nil {
		fmt.Fprintln(os.Stderr, "testreport:", err)
		os.Exit(2)
	}
	if failed {
		os.Exit(1)
	}
}

// options says what report prints; the zero value prints everything but
// the slowest list.
type options struct {
	slowest       int
	quietPackages bool // no package results and build output
	quietFailures bool // no failed tests' output
	quietSummary  bool // no skipped and slowest lists
}

func report(in io.Reader, out io.Writer, o options) (failed bool, err error) {
	var (
		buffered = map[string][]string{} // package + "\x00" + test → output
		tests    []timing
		packages []timing
		skipped  []string
	)
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	for sc.Scan() {
		line := sc.Bytes()
		var e event
		if json.Unmarshal(line, &e) != nil {
			if !o.quietPackages {
				fmt.Fprintln(out, string(line)) // not JSON: go's own messages
			}
			continue
		}
		key := e.Package + "\x00" + e.Test
		switch e.Action {
		case "build-output":
			if !o.quietPackages {
				fmt.Fprint(out, e.Output)
			}
		case "build-fail":
			failed = true
		case "output":
			if e.Test == "" {
				// Package-level lines: "ok ...", "FAIL ...", panics
				// outside tests. The verbose PASS/RUN lines are noise.
				if !o.quietPackages && !strings.HasPrefix(e.Output, "=== ") && !strings.HasPrefix(e.Output, "PASS\n") {
					fmt.Fprint(out, e.Output)
				}
				continue
			}
			buffered[key] = append(buffered[key], e.Output)
		case "pass", "skip", "fail":
			d := time.Duration(e.Elapsed * float64(time.Second))
			if e.Test == "" {
				packages = append(packages, timing{e.Package, d})
				if e.Action == "fail" {
					failed = true
				}
				continue
			}
			if e.Action == "fail" {
				failed = true
				if !o.quietFailures {
					fmt.Fprintf(out, "--- output of failed %s %s\n", e.Package, e.Test)
					fmt.Fprint(out, strings.Join(buffered[key], ""))
				}
			}
			if e.Action == "skip" {
				skipped = append(skipped, e.Package+" "+e.Test)
			}
			if !strings.Contains(e.Test, "/") {
				tests = append(tests, timing{e.Package + " " + e.Test, d})
			}
			delete(buffered, key)
		}
	}
	if err := sc.Err(); err != nil {
		return true, err
	}
	if o.quietSummary {
		return failed, nil
	}
	byTime := func(a, b timing) int { return int(b.elapsed - a.elapsed) }
	slices.SortFunc(tests, byTime)
	slices.SortFunc(packages, byTime)
	if len(skipped) > 0 {
		fmt.Fprintf(out, "\nskipped (%d): %s\n", len(skipped), strings.Join(skipped, ", "))
	}
	fmt.Fprintf(out, "\nslowest tests (of %d):\n", len(tests))
	for _, t := range tests[:min(o.slowest, len(tests))] {
		fmt.Fprintf(out, "  %8.1fs  %s\n", t.elapsed.Seconds(), t.name)
	}
	fmt.Fprintf(out, "packages by time:\n")
	for _, p := range packages[:min(o.slowest, len(packages))] {
		fmt.Fprintf(out, "  %8.1fs  %s\n", p.elapsed.Seconds(), p.name)
	}
	return failed, nil
}
