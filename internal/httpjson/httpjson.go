// Package httpjson writes the JSON answers of riverslot's HTTP packages
// (riverslotweb and serve) one way: the body is encoded before anything is
// written, so an encoding failure is a 500 and never a 200 cut short, and
// an internal error reaches the client only as a request id while its
// cause goes to the log.
package httpjson

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"log/slog"
	"net/http"
	"strings"
)

// Write answers status with v as indented JSON. It encodes v first and
// returns the encoding error without writing anything, so the caller can
// answer a 500 instead.
func Write(w http.ResponseWriter, status int, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	header(w)
	w.WriteHeader(status)
	_, _ = w.Write(append(b, '\n'))
	return nil
}

// Error answers status with one line of JSON, {"error": msg}.
func Error(w http.ResponseWriter, status int, msg string) {
	b, _ := json.Marshal(map[string]string{"error": strings.ReplaceAll(msg, "\n", " ")})
	header(w)
	w.WriteHeader(status)
	_, _ = w.Write(append(b, '\n'))
}

func header(w http.ResponseWriter) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("X-Content-Type-Options", "nosniff")
}

// Logged logs err at error level under a new request id, with the
// request's method and path, and returns the id. What a response says of
// err is the id: never its text, which may hold SQL, table names or a
// connection string.
func Logged(ctx context.Context, logger *slog.Logger, r *http.Request, msg string, err error) string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	id := hex.EncodeToString(b[:])
	logger.ErrorContext(ctx, msg, slog.String("method", r.Method), slog.String("path", r.URL.Path),
		slog.String("request_id", id), slog.String("error", err.Error()))
	return id
}
