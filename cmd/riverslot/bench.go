package main

import (
	"context"
	"io"
)

func runBench(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	return usageErr("bench is not implemented yet")
}
