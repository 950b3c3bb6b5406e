package riverslotweb

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"html/template"
	"log/slog"
	"net/http"

	"github.com/riverslot/riverslot"
	"github.com/riverslot/riverslot/internal/httpjson"
)

// responder is how both pages answer: every request within Timeout, bad
// input and unknown tasks or cycles said as they are, any other error (the
// database's) only by a request id under which it is logged.
type responder struct {
	config *Config
	logger *slog.Logger
}

func (p *responder) ctx(r *http.Request) (context.Context, context.CancelFunc) {
	return context.WithTimeout(r.Context(), p.config.Timeout)
}

// task returns the task named by ?task=, s's first task when empty; it
// answers 404 itself when s has none of that name.
func (p *responder) task(w http.ResponseWriter, r *http.Request, s *riverslot.Scheduler) (string, bool) {
	name := r.URL.Query().Get("task")
	if name == "" {
		return s.TaskNames()[0], true
	}
	if _, err := s.Task(name); err != nil {
		writeError(w, http.StatusNotFound, err.Error())
		return "", false
	}
	return name, true
}

// fail answers err: 404 when it wraps riverslot.ErrNoCycle (no such cycle,
// said as it is), else 500. A 500 is logged with the error and a request
// id; its body gives the id only, never the database's error (table
// names, schema, SQL): the page may be open to more people than the
// database is.
func (p *responder) fail(w http.ResponseWriter, r *http.Request, err error) {
	if errors.Is(err, riverslot.ErrNoCycle) {
		writeError(w, http.StatusNotFound, err.Error())
		return
	}
	writeError(w, http.StatusInternalServerError, p.logged(r, err))
}

// shown says what a page shows of err: a missing cycle as it is, any
// other error only by a request id, logged with its cause as fail logs it.
func (p *responder) shown(r *http.Request, err error) string {
	if errors.Is(err, riverslot.ErrNoCycle) {
		return err.Error()
	}
	return p.logged(r, err)
}

// logged logs err with a new request id and returns what a response may
// say of it: the id, never the database's error.
func (p *responder) logged(r *http.Request, err error) string {
	id := httpjson.Logged(r.Context(), p.logger, r, "riverslot handler: request failed", err)
	return "internal error reading the schedule (request " + id + "); the server's log has the cause under request_id " + id
}

// writeJSON answers 200 with v as indented JSON. v is encoded before
// anything is written: should it fail, the answer is fail's 500 (its
// cause logged under a request id), never a 200 cut short.
func (p *responder) writeJSON(w http.ResponseWriter, r *http.Request, v any) {
	if err := httpjson.Write(w, http.StatusOK, v); err != nil {
		p.fail(w, r, fmt.Errorf("error encoding the answer: %w", err))
	}
}

// writeError answers one line of JSON: {"error": "..."}.
func writeError(w http.ResponseWriter, code int, msg string) { httpjson.Error(w, code, msg) }

// render writes the page tmpl makes of data, with the headers that keep
// it self-contained (no script, no outside resource).
func (p *responder) render(w http.ResponseWriter, r *http.Request, tmpl *template.Template, data any) {
	var buf bytes.Buffer
	if err := tmpl.Execute(&buf, data); err != nil {
		p.fail(w, r, fmt.Errorf("error rendering the page: %w", err))
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("Content-Security-Policy", "default-src 'none'; style-src 'unsafe-inline'; img-src data:; form-action 'self'; frame-ancestors 'none'")
	_, _ = w.Write(buf.Bytes())
}
