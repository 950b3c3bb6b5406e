package serve

import (
	"cmp"
	"context"
	"crypto/rand"
	_ "embed"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/riverslot/riverslot"
	"github.com/riverslot/riverslot/internal/bootstrap"
	"github.com/riverslot/riverslot/internal/httpjson"
	"github.com/riverslot/riverslot/internal/upstream"
	"github.com/riverslot/riverslot/slotplan"
)

//go:embed openapi.json
var openAPI []byte

// page is the operator's page: static, it reads the API with a token the
// operator types in; every value is set as text, never as markup.
//
//go:embed page.html
var page []byte

//go:embed page.js
var pageJS []byte

//go:embed page.css
var pageCSS []byte

// PageCSP is the Content-Security-Policy of the operator's page: its own
// script and style files only (no inline script or style), requests to
// the API only.
const PageCSP = "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self'; form-action 'none'; frame-ancestors 'none'; base-uri 'none'"

// Schedule is a schedule as the API reads and writes it.
type Schedule struct {
	ID uuid.UUID `json:"id"`
	// Tenant owns the schedule; ExternalID is the caller's own id of it,
	// unique per tenant (a create naming one that exists answers it).
	Tenant     uuid.UUID         `json:"tenant"`
	ExternalID *string           `json:"external_id,omitempty"`
	URL        string            `json:"url"`
	Method     string            `json:"method"`
	Headers    map[string]string `json:"headers"`
	Body       string            `json:"body"`
	Period     string            `json:"period"`
	Timeout    string            `json:"timeout"`
	Retries    int               `json:"retries"`
	Upstream   string            `json:"upstream"`
	Paused     bool              `json:"paused"`
	// PausedReason says why a paused schedule is: PausedGone or
	// PausedByRequest (absent while it is not paused, and for a schedule
	// paused before the service recorded why).
	PausedReason *string `json:"paused_reason,omitempty"`
	// CatchUp is what a call the service was not there to make at its
	// place brings (a period it did not start, or a place passed while it
	// was down): CatchUpSkip (no call, an entry MissedServerDown; the next
	// call at its place) or CatchUpOne (one call as soon as the service is
	// back, then the places).
	CatchUp string `json:"catch_up"`
	// Offset is the schedule's place in its period: every call is due
	// that long after a period starts. For a monthly schedule it is the
	// place in the current month, and MonthFraction the place in every
	// month (0 its start, 1 its end): each month's call is due at its
	// start plus that fraction of its length.
	Offset        string      `json:"offset"`
	OffsetSeconds float64     `json:"offset_seconds"`
	MonthFraction float64     `json:"month_fraction,omitempty"`
	NextCalls     []time.Time `json:"next_calls"`
	CreatedAt     time.Time   `json:"created_at"`
	UpdatedAt     time.Time   `json:"updated_at"`
	DeletedAt     *time.Time  `json:"deleted_at,omitempty"`
	// Health is how its calls go.
	Health    *Health `json:"health,omitempty"`
	LastCalls []Call  `json:"last_calls,omitempty"`
}

// Health sums a schedule's recent calls up.
type Health struct {
	// Status is "ok" (its last call succeeded), "failing" (it failed),
	// "missed" (its last period's call was not made: LastCall.Missed says
	// why), "never_called", "paused" or "deleted".
	Status string `json:"status"`
	// LastCall is its latest call (a retry counts).
	LastCall *Call `json:"last_call,omitempty"`
	// RecentFailures counts the failed calls among its last 10.
	RecentFailures int `json:"recent_failures"`
}

// Why a schedule is paused (Schedule.PausedReason).
const (
	// PausedGone: a call of it got 410 Gone (at its place, triggered or
	// caught up): the receiver says the endpoint is gone for good.
	// PATCH {"paused": false} resumes it.
	PausedGone = "gone"
	// PausedByRequest: a create or a PATCH asked for it.
	PausedByRequest = "request"
)

// HiddenValue stands for a header's value in answers: values are
// write-only (they often hold the target's credentials).
const HiddenValue = "(hidden)"

// Call is one call of a schedule.
type Call struct {
	StartedAt       time.Time  `json:"started_at"`
	DueAt           *time.Time `json:"due_at,omitempty"`
	LatenessSeconds *float64   `json:"lateness_seconds,omitempty"`
	Attempt         int        `json:"attempt"`
	Status          *int       `json:"status,omitempty"`
	LatencySeconds  float64    `json:"latency_seconds"`
	OK              bool       `json:"ok"`
	Error           *string    `json:"error,omitempty"`
	// Missed, set on an entry of a call that was not made, says why
	// (MissedServerDown, MissedFanOutLate, MissedLate,
	// MissedUpstreamPaused, MissedUpstreamDown, MissedQuota); StartedAt is then its
	// place.
	Missed *string `json:"missed,omitempty"`
	// Triggered is a call made by POST /v1/schedules/{id}/trigger, outside
	// its place.
	Triggered bool `json:"triggered,omitempty"`
}

// input is a create or a change: nil fields are not given.
type input struct {
	Tenant     *string            `json:"tenant"`
	ExternalID *string            `json:"external_id"`
	URL        *string            `json:"url"`
	Method     *string            `json:"method"`
	Headers    *map[string]string `json:"headers"`
	Body       *string            `json:"body"`
	Period     *string            `json:"period"`
	Timeout    *string            `json:"timeout"`
	Retries    *int               `json:"retries"`
	Upstream   *string            `json:"upstream"`
	Paused     *bool              `json:"paused"`
	CatchUp    *string            `json:"catch_up"`
}

// apiError is a 4xx answer: the field at fault and how to fix it.
type apiError struct {
	status int
	// cause is an internal error: logged under a request id, never sent.
	cause error
	// logged is the cause of a 4xx whose message is fixed (the JSON
	// decoder's, the resolver's error): logged at info under a request id
	// the answer names, never sent.
	logged error
	// challenge asks for the service's bearer token (a 401's
	// WWW-Authenticate).
	challenge bool
	Field     string `json:"field,omitempty"`
	// Quota is the tenant's quota a 429 ran into.
	Quota string `json:"quota,omitempty"`
	Error string `json:"error"`
}

func badField(field, format string, args ...any) *apiError {
	return &apiError{status: http.StatusBadRequest, Field: field, Error: field + " " + fmt.Sprintf(format, args...)}
}

// Endpoint is one of the API's endpoints and the narrowest scope allowed
// to call it (ScopeRead: every token; ScopeTenant: tenant and admin
// tokens; ScopeAdmin: admin tokens). A tenant's token sees its tenant's
// schedules, tokens, calls and stats only: another tenant's answer 404.
type Endpoint struct {
	Method, Path string
	Scope        Scope
	handler      func(*Server, http.ResponseWriter, *http.Request) (int, any)
}

// endpoints are the API's endpoints that need a token.
var endpoints = []Endpoint{
	{"POST", "/v1/schedules", ScopeTenant, (*Server).create},
	{"GET", "/v1/schedules", ScopeRead, (*Server).list},
	{"GET", "/v1/schedules/{id}", ScopeRead, (*Server).get},
	{"PATCH", "/v1/schedules/{id}", ScopeTenant, (*Server).patch},
	{"DELETE", "/v1/schedules/{id}", ScopeTenant, (*Server).delete},
	{"POST", "/v1/schedules/{id}/trigger", ScopeTenant, (*Server).trigger},
	{"POST", "/v1/tokens", ScopeTenant, (*Server).newToken},
	{"GET", "/v1/tokens", ScopeTenant, (*Server).listTokens},
	{"DELETE", "/v1/tokens/{id}", ScopeTenant, (*Server).deleteToken},
	{"GET", "/v1/stats", ScopeRead, (*Server).stats},
	{"GET", "/v1/me", ScopeRead, (*Server).me},
	{"GET", "/v1/signing-secret", ScopeTenant, (*Server).apiSigningSecret},
	{"POST", "/v1/signing-secret/rotate", ScopeTenant, (*Server).apiRotate},
	{"POST", "/v1/tenants", ScopeAdmin, (*Server).createTenant},
	{"GET", "/v1/tenants", ScopeAdmin, (*Server).listTenants},
	{"GET", "/v1/tenants/{id}", ScopeAdmin, (*Server).getTenant},
	{"PATCH", "/v1/tenants/{id}", ScopeAdmin, (*Server).patchTenant},
	{"DELETE", "/v1/tenants/{id}", ScopeAdmin, (*Server).deleteTenant},
}

// Endpoints lists the API's endpoints that need a token, with the scope
// each needs (the OpenAPI document's x-scope).
func Endpoints() []Endpoint { return slices.Clone(endpoints) }

// Handler is the service's HTTP API (/v1/...); every endpoint but the
// OpenAPI document and the operator's page (/v1/page, which asks for a
// token and reads the API with it) needs a token, of the scope Endpoints
// names.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/openapi.json", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(openAPI)
	})
	// The page and its script and style, each its own file: the policy
	// allows no inline script or style.
	for path, file := range map[string]struct {
		body []byte
		typ  string
	}{
		"/v1/page":     {page, "text/html; charset=utf-8"},
		"/v1/page.js":  {pageJS, "text/javascript; charset=utf-8"},
		"/v1/page.css": {pageCSS, "text/css; charset=utf-8"},
	} {
		mux.HandleFunc("GET "+path, func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", file.typ)
			w.Header().Set("Content-Security-Policy", PageCSP)
			w.Header().Set("X-Content-Type-Options", "nosniff")
			w.Header().Set("Referrer-Policy", "no-referrer")
			w.Header().Set("Cache-Control", "no-cache")
			_, _ = w.Write(file.body)
		})
	}
	// auth serves h to a token whose scope may do need; every other answer
	// is 401 (no valid token) or 403 (a valid token of a narrower scope).
	auth := func(need Scope, h func(http.ResponseWriter, *http.Request) (int, any)) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			p, e := s.authenticate(r)
			if e != nil {
				s.writeJSON(w, r, e.status, e)
				return
			}
			if !p.can(need) {
				s.writeJSON(w, r, http.StatusForbidden, &apiError{Error: fmt.Sprintf("this token's scope %q may not %s %s: it needs scope %q%s",
					p.Scope, r.Method, r.URL.Path, need, map[bool]string{true: " or \"admin\"", false: ""}[need != ScopeAdmin])})
				return
			}
			r = r.WithContext(context.WithValue(r.Context(), principalKey{}, p))
			r.Body = http.MaxBytesReader(w, r.Body, MaxRequestBytes)
			status, v := h(w, r)
			if e, ok := v.(*apiError); ok && e.status != 0 {
				status = e.status
			}
			s.writeJSON(w, r, status, v)
		}
	}
	for _, e := range endpoints {
		mux.HandleFunc(e.Method+" "+e.Path, auth(e.Scope, func(w http.ResponseWriter, r *http.Request) (int, any) { return e.handler(s, w, r) }))
	}
	return mux
}

// authenticate returns who r speaks for: Config.Authenticate's Principal
// when it is set, else r's token's (TokenAuth). A request it refuses is
// a 401 (with WWW-Authenticate for the service's tokens); the error of
// the team's own Authenticate stays in the log, and a Principal it
// returns that cannot be (an unknown scope, a tenant's scope without a
// tenant) is a 500, its cause logged.
func (s *Server) authenticate(r *http.Request) (Principal, *apiError) {
	var (
		p   Principal
		err error
	)
	if s.cfg.Authenticate == nil {
		p, err = s.TokenAuth(r)
	} else {
		p, err = s.cfg.Authenticate(r)
	}
	switch {
	case errors.Is(err, ErrUnauthenticated):
		return p, &apiError{status: http.StatusUnauthorized, Error: ErrUnauthenticated.Error(), challenge: true}
	case err != nil:
		// Not ErrUnauthenticated: the team's auth failed (its backend
		// down, say), which a wave of silent 401s would hide.
		s.cfg.Logger.WarnContext(r.Context(), "riverslot serve: Config.Authenticate failed; the request is answered 401", slog.String("method", r.Method), slog.String("path", r.URL.Path), slog.String("error", err.Error()))
		return p, &apiError{status: http.StatusUnauthorized, Error: "the request is not authenticated"}
	}
	if s.cfg.Authenticate != nil {
		if err := p.check(); err != nil {
			return p, &apiError{status: http.StatusInternalServerError, cause: err}
		}
	}
	return p, nil
}

// writeJSON answers status with v (httpjson.Write). An internal error
// (an apiError with a cause) is logged under a request id, and the answer
// names only the id: the database's error text never reaches a client.
func (s *Server) writeJSON(w http.ResponseWriter, r *http.Request, status int, v any) {
	if e, ok := v.(*apiError); ok && e.challenge {
		w.Header().Set("WWW-Authenticate", `Bearer realm="riverslot"`)
	}
	if e, ok := v.(*apiError); ok && e.cause == nil && e.logged != nil {
		id := requestID()
		s.cfg.Logger.InfoContext(r.Context(), "riverslot serve: request refused", slog.String("method", r.Method), slog.String("path", r.URL.Path),
			slog.Int("status", status), slog.String("field", e.Field), slog.String("request_id", id), slog.String("error", e.logged.Error()))
		e.Error += " (request " + id + ")"
	}
	if e, ok := v.(*apiError); ok && e.cause != nil {
		id := httpjson.Logged(r.Context(), s.cfg.Logger, r, "riverslot serve: request failed", e.cause)
		e.Error = "internal error (request " + id + "); the server's log has the cause under request_id " + id
	}
	if err := httpjson.Write(w, status, v); err != nil {
		id := httpjson.Logged(r.Context(), s.cfg.Logger, r, "riverslot serve: error encoding the answer", err)
		httpjson.Error(w, http.StatusInternalServerError, "internal error (request "+id+")")
	}
}

// requestID is a new request id: 12 hex digits.
func requestID() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// internal answers 500 for err, an error of the server's own (the
// database's, say): writeJSON logs it and sends only a request id.
func internal(err error) (int, any) {
	return http.StatusInternalServerError, &apiError{status: http.StatusInternalServerError, cause: err}
}

// decode reads a JSON object into v, refusing unknown fields. A body it
// cannot read is a 400 with a fixed message naming the field at fault
// (its JSON name, as the request spelt it) and the fix; the decoder's own
// error text stays in the log, under the request id the answer names.
func decode(r *http.Request, v any) *apiError {
	dec := json.NewDecoder(r.Body)
	dec.DisallowUnknownFields()
	err := dec.Decode(v)
	if err == nil && dec.More() {
		err = errors.New("data after the JSON object")
		return &apiError{status: http.StatusBadRequest, logged: err, Error: "the request body holds more than one JSON value: send one JSON object"}
	}
	if err == nil {
		return nil
	}
	var (
		tooBig    *http.MaxBytesError
		syntax    *json.SyntaxError
		wrongType *json.UnmarshalTypeError
	)
	bad := func(field, format string, args ...any) *apiError {
		e := &apiError{status: http.StatusBadRequest, logged: err, Error: fmt.Sprintf(format, args...)}
		if field != "" {
			e.Field, e.Error = field, field+" "+e.Error
		}
		return e
	}
	switch {
	case errors.As(err, &tooBig):
		return &apiError{status: http.StatusRequestEntityTooLarge, Error: fmt.Sprintf("the request is over %d bytes", MaxRequestBytes)}
	case errors.Is(err, io.EOF):
		return bad("", "the request body is empty: send a JSON object of the fields (GET /v1/openapi.json lists them)")
	case errors.As(err, &syntax):
		return bad("", "the request body is not valid JSON (at byte %d): send one JSON object", syntax.Offset)
	case errors.Is(err, io.ErrUnexpectedEOF):
		return bad("", "the request body ends inside its JSON: send one whole JSON object")
	case errors.As(err, &wrongType) && wrongType.Field == "headers":
		return bad("headers", "must be a JSON object of header names and string values")
	case errors.As(err, &wrongType) && wrongType.Field != "":
		return bad(wrongType.Field, "must be %s", jsonKind(wrongType.Type))
	case errors.As(err, &wrongType):
		return bad("", "the request body must be a JSON object of the fields, not %s", cmp.Or(map[string]string{"array": "an array", "number": "a number", "string": "a string", "bool": "true or false"}[wrongType.Value], "that"))
	}
	// The decoder says "json: unknown field \"name\"" and has no type of
	// its own for it.
	if name, ok := strings.CutPrefix(err.Error(), `json: unknown field "`); ok {
		if name, ok = strings.CutSuffix(name, `"`); ok && len(name) <= 64 && utf8.ValidString(name) && validHeaderValue(name) {
			return bad(name, "is not a field of this request (GET /v1/openapi.json lists them)")
		}
		return bad("", "the request body has a field this request does not take (GET /v1/openapi.json lists them)")
	}
	return bad("", "the request body could not be read as a JSON object of the fields (GET /v1/openapi.json lists them)")
}

// jsonKind names what JSON value a field of Go type t takes.
func jsonKind(t reflect.Type) string {
	for t != nil && t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t == nil {
		return "another JSON value"
	}
	switch t.Kind() {
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "true or false"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64, reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "a whole number"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.Map, reflect.Struct:
		return "a JSON object"
	case reflect.Slice, reflect.Array:
		return "a JSON array"
	}
	return "another JSON value"
}

var methods = []string{http.MethodGet, http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete, http.MethodHead}

// forbiddenHeaders are set by the server, not by a schedule.
var forbiddenHeaders = []string{"host", "content-length", "transfer-encoding", "connection", "te", "upgrade", "trailer", "keep-alive",
	"proxy-authorization", "proxy-authenticate", "proxy-connection", HeaderWebhookID, HeaderWebhookTimestamp, HeaderWebhookSignature}

// validHeaderName reports whether k is an HTTP token (RFC 9110).
func validHeaderName(k string) bool {
	if k == "" {
		return false
	}
	for _, c := range []byte(k) {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0) {
			return false
		}
	}
	return true
}

// validHeaderValue reports whether v is one line of visible characters,
// spaces and tabs.
func validHeaderValue(v string) bool {
	for _, c := range []byte(v) {
		if c < ' ' && c != '\t' || c == 0x7f {
			return false
		}
	}
	return true
}

// row is a schedule as stored.
type row struct {
	tenant                      uuid.UUID
	url, method, body, upstream string
	headers                     map[string]string
	period, timeout             time.Duration
	retries                     int
	paused                      bool
	catchUp                     string
}

// apply checks in's fields and sets them on r (create: every required
// field given).
func (s *Server) apply(ctx context.Context, r *row, in input, create bool) *apiError {
	if in.Method != nil {
		m := strings.ToUpper(*in.Method)
		if !slices.Contains(methods, m) {
			return badField("method", "must be one of %s, got %q", strings.Join(methods, ", "), *in.Method)
		}
		r.method = m
	}
	if in.Headers != nil {
		if len(*in.Headers) > MaxHeaders {
			return badField("headers", "may hold at most %d headers, got %d", MaxHeaders, len(*in.Headers))
		}
		size, headers := 0, map[string]string{}
		for k, v := range *in.Headers {
			size += len(k) + len(v)
			if !validHeaderName(k) || !validHeaderValue(v) {
				return badField("headers", "has an invalid header %q: names are tokens, values one line of printable text", k)
			}
			if slices.Contains(forbiddenHeaders, strings.ToLower(k)) {
				return badField("headers", "may not set %s: the server sets it", k)
			}
			ck := http.CanonicalHeaderKey(k)
			if _, dup := headers[ck]; dup {
				return badField("headers", "names %s twice (header names are case-insensitive)", ck)
			}
			headers[ck] = v
		}
		if size > MaxHeaderBytes {
			return badField("headers", "are %d bytes; at most %d", size, MaxHeaderBytes)
		}
		r.headers = headers
	}
	if in.Body != nil {
		if len(*in.Body) > MaxBody {
			return badField("body", "is %d bytes; at most %d", len(*in.Body), MaxBody)
		}
		r.body = *in.Body
	}
	if in.Period != nil || create {
		if in.Period == nil {
			return badField("period", `is required: one of %s`, s.periodList())
		}
		p, err := ParsePeriod(*in.Period)
		if err != nil {
			return badField("period", "%v", err)
		}
		if _, ok := s.tasks[p]; !ok {
			return badField("period", "%s is not served here; this server serves %s (the nearest: %s); riverslot serve --periods adds periods",
				FormatPeriod(p), s.periodList(), FormatPeriod(s.nearest(p)))
		}
		r.period = p
	}
	if in.Timeout != nil {
		d, err := time.ParseDuration(*in.Timeout)
		if err != nil || d < 100*time.Millisecond || d > MaxTimeout {
			return badField("timeout", "must be a duration between 100ms and %s, e.g. \"10s\"; got %q", MaxTimeout, *in.Timeout)
		}
		r.timeout = d
	}
	if r.period != Monthly && r.timeout > r.period/2 {
		return badField("timeout", "%s is more than half the period %s; give a shorter timeout or a longer period", r.timeout, FormatPeriod(r.period))
	}
	if in.Retries != nil {
		if *in.Retries < 0 || *in.Retries > MaxRetries {
			return badField("retries", "must be between 0 and %d, got %d", MaxRetries, *in.Retries)
		}
		r.retries = *in.Retries
	}
	// The URL last of the checks a request can fail alone: its guard may
	// resolve the host, and an unreachable resolver must not hide a bad
	// period or header behind a DNS error.
	if in.URL != nil || create {
		if in.URL == nil {
			return badField("url", "is required: the URL to call, e.g. https://api.example.com/hook")
		}
		u, err := s.cfg.Guard.CheckURL(ctx, *in.URL)
		if err != nil {
			// The message is the guard's own; a cause under it (the
			// resolver's error, which names the server's DNS) is logged.
			e := badField("url", "%s", err.Error())
			e.logged = errors.Unwrap(err)
			return e
		}
		// The upstream key stays the tenant's, of the URL's scheme, host
		// and port (and the sub-key it had): a new URL moves the schedule
		// to its new host's limits.
		sub := subKey(*r)
		r.url, r.upstream = u.String(), upstreamKey(r.tenant, u, sub)
	}
	if in.Upstream != nil {
		// A sub-key within the tenant's URL host: a schedule can share or
		// split its own host's limits, never pause another tenant's or
		// another host's schedules.
		sub := *in.Upstream
		u, err := url.Parse(r.url)
		if err != nil {
			return &apiError{status: http.StatusInternalServerError, cause: fmt.Errorf("schedule's stored url %q: %w", r.url, err)}
		}
		if strings.EqualFold(sub, u.Host) || strings.EqualFold(sub, u.Hostname()) {
			sub = ""
		}
		if len(sub) > 64 || strings.Contains(sub, "/") || !validHeaderValue(sub) || !utf8.ValidString(sub) {
			return badField("upstream", "must be a sub-key of at most 64 printable bytes without \"/\" (limits count per host/sub-key; \"\" or the host: the host's own), got %q", *in.Upstream)
		}
		r.upstream = upstreamKey(r.tenant, u, sub)
	}
	// The limiter cuts a longer key (upstream.MaxKeyLen): two schedules
	// whose keys differ only past it would share limits.
	if len(r.upstream) > upstream.MaxKeyLen {
		field := "upstream"
		if in.Upstream == nil {
			field = "url"
		}
		return badField(field, "makes the upstream key %q, %d bytes; keys are at most %d (a shorter sub-key, or a shorter host name)", r.upstream, len(r.upstream), upstream.MaxKeyLen)
	}
	if in.CatchUp != nil {
		if *in.CatchUp != CatchUpSkip && *in.CatchUp != CatchUpOne {
			return badField("catch_up", "must be %q (a call missed while the service was down is not made again) or %q (one call as soon as the service is back), got %q", CatchUpSkip, CatchUpOne, *in.CatchUp)
		}
		r.catchUp = *in.CatchUp
	}
	if in.Paused != nil {
		r.paused = *in.Paused
	}
	return nil
}

// upstreamKey is the limiter's key of a tenant's schedule: the tenant,
// its URL's scheme, host and port (the scheme's default when the URL
// names none), "<tenant> https://api.example.com:443", and its sub-key
// after a "/" when it has one. One tenant's throttled endpoint pauses only
// that tenant's schedules of that endpoint: never another tenant's, nor
// another service on the same host.
func upstreamKey(tenant uuid.UUID, u *url.URL, sub string) string {
	port := u.Port()
	if port == "" {
		port = map[string]string{"http": "80", "https": "443"}[u.Scheme]
	}
	key := tenant.String() + " " + strings.ToLower(u.Scheme) + "://" + strings.ToLower(net.JoinHostPort(u.Hostname(), port))
	if sub == "" {
		return key
	}
	return key + "/" + sub
}

// subKey is the sub-key of r's upstream key ("" when none).
func subKey(r row) string {
	u, err := url.Parse(r.url)
	if r.upstream == "" || err != nil {
		return ""
	}
	_, sub, _ := strings.Cut(strings.TrimPrefix(r.upstream, upstreamKey(r.tenant, u, "")), "/")
	return sub
}

func (s *Server) periodList() string {
	var out []string
	for _, p := range s.cfg.Periods {
		out = append(out, FormatPeriod(p))
	}
	return strings.Join(out, ", ")
}

func (s *Server) nearest(p time.Duration) time.Duration {
	best := s.cfg.Periods[len(s.cfg.Periods)-1] // the longest fixed period, or Monthly alone
	for _, q := range s.cfg.Periods {
		if q != Monthly && absDur(q-p) < absDur(best-p) {
			best = q
		}
	}
	return best
}

func absDur(d time.Duration) time.Duration {
	if d < 0 {
		return -d
	}
	return d
}

const scheduleColumns = `id, tenant_id, external_id, url, method, headers, body, period_ms, timeout_ms, retries, upstream, paused, paused_reason, catch_up, created_at, updated_at, deleted_at`

func (s *Server) scan(rows pgx.CollectableRow) (Schedule, error) {
	var (
		sc                   Schedule
		periodMS             int64
		timeoutMS            int
		created, updated     time.Time
		deleted              *time.Time
		headers              map[string]string
		url, method, body, u string
	)
	if err := rows.Scan(&sc.ID, &sc.Tenant, &sc.ExternalID, &url, &method, &headers, &body, &periodMS, &timeoutMS, &sc.Retries, &u, &sc.Paused, &sc.PausedReason, &sc.CatchUp, &created, &updated, &deleted); err != nil {
		return sc, err
	}
	// Header values often hold the target's credentials: write-only.
	for k := range headers {
		headers[k] = HiddenValue
	}
	sc.URL, sc.Method, sc.Headers, sc.Body, sc.Upstream = url, method, headers, body, u
	sc.CreatedAt, sc.UpdatedAt, sc.DeletedAt = created, updated, deleted
	period := time.Duration(periodMS) * time.Millisecond
	sc.Period, sc.Timeout = FormatPeriod(period), (time.Duration(timeoutMS) * time.Millisecond).String()
	s.place(&sc, period, time.Now(), false)
	return sc, nil
}

// periodBegun is whether a task's period starting at start is begun, as
// read at read (readBegun); final once the ledger says so.
type periodBegun struct {
	start, read time.Time
	yes, final  bool
}

// readBegun reads, for each task whose current period is not known to be
// begun, whether it is now (at most every 2 s): place promises the current
// period's calls only then. A period is begun when riverslot's ledger has
// its cycle or an earlier one, or River holds a bootstrap job of an earlier
// period (the service ran before it began: its trigger makes it, late if
// the machine is busy), or its own bootstrap job is queued or running
// while it can still make the period: within LateGrace of its start
// (later, FirstCycleNext leaves a first period to the next, so a fresh
// start's next_calls never promise a call of the current period while its
// bootstrap is in line). A task's first period, the one the service
// started in, is begun only if its bootstrap makes it (Task.FirstCycle).
func (s *Server) readBegun(ctx context.Context) error {
	now := time.Now()
	for _, info := range s.tasks {
		start := info.Schedule.Start(now)
		s.beganMu.Lock()
		b := s.began[info.Name]
		s.beganMu.Unlock()
		if b.start.Equal(start) && (b.final || now.Sub(b.read) < 2*time.Second) {
			continue
		}
		cycles, err := s.ledger.Cycles(ctx, s.cfg.Pool, info.Name, time.Time{}, start.Add(time.Millisecond), 1) // timestamptz keeps microseconds: a nanosecond past start is start
		if err != nil {
			return err
		}
		b = periodBegun{start: start, read: now, yes: len(cycles) > 0, final: len(cycles) > 0}
		if !b.yes {
			// River's bootstrap jobs of the task, by the args' index. The
			// period's own bootstrap, queued or running, makes it only if
			// it runs within LateGrace of the period's start (serve's
			// tasks keep the default, the slot): a first period begun
			// longer ago is left to the next (FirstCycleNext), so it is
			// not begun however soon the bootstrap runs.
			ownMayMake := now.Sub(start) <= info.Plan.SlotDuration
			err := s.cfg.Pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM `+pgx.Identifier{s.cfg.Schema, "river_job"}.Sanitize()+`
WHERE kind = $1 AND args @> jsonb_build_object('task', $2::text) AND ((args->>'cycle_start')::timestamptz < $3
	OR $4 AND (args->>'cycle_start')::timestamptz = $3 AND state NOT IN ('completed', 'cancelled', 'discarded')))`, bootstrap.Kind, info.Name, start, ownMayMake).Scan(&b.yes)
			if err != nil {
				return err
			}
		}
		s.beganMu.Lock()
		s.began[info.Name] = b
		s.beganMu.Unlock()
	}
	return nil
}

// begun reports whether the task's period starting at start is
// bootstrapped, as readBegun last read.
func (s *Server) begun(task string, start time.Time) bool {
	s.beganMu.Lock()
	defer s.beganMu.Unlock()
	b := s.began[task]
	return b.yes && b.start.Equal(start)
}

// place fills the schedule's offset and next calls (none while paused or
// deleted): the calls that will be made, from the first. A period whose
// fan-out for the schedule's slot has already run is skipped, as the
// schedule was not there to be selected; so is the current period when no
// process has started it (a server's first period, from its start, is the
// next one: Task.FirstCycle; a period the service was down for at its
// start is made late, if at all, and shown once it is).
//
// fresh reads the ledger's slots anew (slotStarted), for a schedule just
// committed.
func (s *Server) place(sc *Schedule, period time.Duration, now time.Time, fresh bool) {
	info, ok := s.tasks[period]
	if !ok {
		return
	}
	start := info.Schedule.Start(now)
	target := info.Due(start, sc.ID)
	sc.Offset = target.Sub(start).String()
	sc.OffsetSeconds = target.Sub(start).Seconds()
	if info.Month != nil {
		// A fraction of the month, the same in every month.
		sc.MonthFraction = float64(slotplan.Fraction(info.Seed, sc.ID)>>11) / (1 << 53)
	}
	sc.NextCalls = []time.Time{}
	if sc.Paused || sc.DeletedAt != nil {
		return
	}
	for c := start; len(sc.NextCalls) < 3; c = info.Schedule.Next(c) {
		if c.Equal(start) && !s.begun(info.Name, start) {
			continue
		}
		due, slotStart := info.Due(c, sc.ID), info.SlotStartOf(c, sc.ID)
		switch {
		case slotStart.Add(-info.Lead).After(now):
			sc.NextCalls = append(sc.NextCalls, due.UTC())
		case c.Equal(start) && now.Sub(slotStart) < info.Schedule.Next(c).Sub(c)/2 && !s.slotStarted(info, start, sc.ID, fresh):
			// Its slot's fan-out is due and has not begun (late, on a
			// busy machine): it will take the schedule, at its place
			// when that is still ahead, else at once or spread after
			// the fan-out by riverslot's late policy (within half a
			// period of the slot's start). TestNextCallsComeTrue once
			// saw a schedule created 1.7 s after its place, before its
			// slot's late fan-out, promised the next period and called
			// in this one. Unless the schedule was there at its place,
			// too long ago, and skips what the service was not there
			// for (catch_up skip: absentAtPlace).
			if sc.CatchUp == CatchUpSkip && sc.CreatedAt.Before(due) && sc.UpdatedAt.Before(due) &&
				now.Sub(due) > s.catchUpAfter(info.Schedule.Next(c).Sub(c)) {
				continue
			}
			if due.Before(now) {
				due = now
			}
			sc.NextCalls = append(sc.NextCalls, due.UTC())
		}
	}
}

// slotStarted reports whether the fan-out of the slot serving id in the
// task's period starting at start has begun, as the ledger records it
// (its first attempt's start, committed before it reads the schedules): a
// schedule there before then is in it, however late the fan-out runs on a
// busy machine. Asked only for a slot whose fan-out time has passed, less
// than half a period after the slot's start; on an error (logged) it
// says begun, the promise it had before.
//
// One read of the period's slots serves a whole list: a slot seen begun
// stays begun, and one not begun is read again after startedFor, or at
// once when fresh (a schedule just committed).
func (s *Server) slotStarted(info riverslot.TaskInfo, start time.Time, id uuid.UUID, fresh bool) bool {
	slot := info.Plan.Shift(info.Plan.SlotOf(id), info.Shift)
	if info.Month != nil {
		slot = info.Month.DayOf(start, info.Seed, id)
	}
	now := time.Now()
	s.startedMu.Lock()
	r, ok := s.started[info.Name]
	s.startedMu.Unlock()
	if ok && r.start.Equal(start) && (r.slots[slot] || (!fresh && now.Sub(r.read) < startedFor)) {
		return r.slots[slot]
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	slots, err := s.ledger.Slots(ctx, s.cfg.Pool, info.Name, info.PlanID, start)
	if err != nil {
		s.cfg.Logger.WarnContext(ctx, "riverslot serve: could not read whether a slot's fan-out began; next_calls leave its period out", "task", info.Name, "cycle_start", start, "slot", slot, "error", err)
		return true
	}
	r = startedRead{start: start, read: now, slots: map[int]bool{}}
	for n, sl := range slots {
		r.slots[n] = sl.Started != nil || sl.Finished != nil
	}
	s.startedMu.Lock()
	s.started[info.Name] = r
	s.startedMu.Unlock()
	return r.slots[slot]
}

// startedFor is how long slotStarted trusts a read that found a slot's
// fan-out not begun: the span of one list request, not more.
const startedFor = 200 * time.Millisecond

// startedRead is the begun slots of a task's current period, as read at
// read (slotStarted).
type startedRead struct {
	start, read time.Time
	slots       map[int]bool
}

// health fills the schedules' Health, in one query (each schedule's last
// ten calls by the calls' index).
func (s *Server) health(ctx context.Context, list []Schedule) error {
	if len(list) == 0 {
		return nil
	}
	ids := make([]uuid.UUID, len(list))
	for i, sc := range list {
		ids[i] = sc.ID
	}
	rows, err := s.cfg.Pool.Query(ctx, `SELECT s.id, c.started_at, c.due_at, c.lateness_ms / 1000, c.attempt, c.status, c.latency_ms / 1000, c.ok, c.error, c.missed, coalesce(c.triggered, false),
	(SELECT count(*) FILTER (WHERE NOT x.ok) FROM (SELECT ok FROM `+s.calls+` WHERE schedule_id = s.id ORDER BY started_at DESC LIMIT 10) x)
FROM unnest($1::uuid[]) AS s(id)
LEFT JOIN LATERAL (SELECT * FROM `+s.calls+` WHERE schedule_id = s.id ORDER BY started_at DESC LIMIT 1) c ON true`, ids)
	if err != nil {
		return err
	}
	byID := map[uuid.UUID]*Health{}
	var (
		id       uuid.UUID
		started  *time.Time
		attempt  *int
		latency  *float64
		ok       *bool
		failures int
		c        Call
	)
	_, err = pgx.ForEachRow(rows, []any{&id, &started, &c.DueAt, &c.LatenessSeconds, &attempt, &c.Status, &latency, &ok, &c.Error, &c.Missed, &c.Triggered, &failures}, func() error {
		h := &Health{RecentFailures: failures, Status: "never_called"}
		if started != nil {
			call := c
			call.StartedAt, call.Attempt, call.LatencySeconds, call.OK = *started, *attempt, *latency, *ok
			h.LastCall = &call
			switch {
			case call.Missed != nil:
				h.Status = "missed"
			case call.OK:
				h.Status = "ok"
			default:
				h.Status = "failing"
			}
		}
		byID[id] = h
		c = Call{} // the pointers are scanned anew
		return nil
	})
	if err != nil {
		return err
	}
	for i := range list {
		h := byID[list[i].ID]
		if h == nil {
			h = &Health{Status: "never_called"}
		}
		switch {
		case list[i].DeletedAt != nil:
			h.Status = "deleted"
		case list[i].Paused:
			h.Status = "paused"
		}
		list[i].Health = h
	}
	return nil
}

// requestTenant is the tenant a create is for: the token's, or for an
// admin the body's "tenant" (default: the default tenant).
func (s *Server) requestTenant(r *http.Request, named *string) (uuid.UUID, *apiError) {
	p := principalOf(r)
	var id uuid.UUID
	if named != nil {
		var err error
		if id, err = uuid.Parse(*named); err != nil {
			return uuid.Nil, badField("tenant", "must be a tenant's id (GET /v1/tenants lists them), got %q", *named)
		}
	}
	switch {
	case p.Scope != ScopeAdmin && named != nil && id != p.Tenant:
		return uuid.Nil, &apiError{status: http.StatusForbidden, Field: "tenant", Error: "tenant: a tenant's token makes its own tenant's schedules only; leave tenant out"}
	case p.Scope != ScopeAdmin:
		return p.Tenant, nil
	case named != nil:
		return id, nil
	}
	def, err := s.DefaultTenant(r.Context())
	if err != nil {
		return uuid.Nil, &apiError{status: http.StatusInternalServerError, cause: err}
	}
	return def, nil
}

// create serves POST /v1/schedules: 201 and the schedule, or, when the
// tenant has a schedule of the request's external_id, 200 and that one
// (a retried create makes one schedule).
func (s *Server) create(w http.ResponseWriter, r *http.Request) (int, any) {
	if err := s.readBegun(r.Context()); err != nil {
		return internal(err)
	}
	var in input
	if e := decode(r, &in); e != nil {
		return 0, e
	}
	tenant, e := s.requestTenant(r, in.Tenant)
	if e != nil {
		return 0, e
	}
	if in.ExternalID != nil && (*in.ExternalID == "" || len(*in.ExternalID) > 200 || !validHeaderValue(*in.ExternalID) || !utf8.ValidString(*in.ExternalID)) {
		return 0, badField("external_id", "must be one line of 1 to 200 printable characters (your own id of the schedule), got %q", *in.ExternalID)
	}
	if in.ExternalID != nil {
		if sc, found, err := s.byExternalID(r.Context(), s.cfg.Pool, tenant, *in.ExternalID); err != nil || found {
			if err != nil {
				return internal(err)
			}
			return http.StatusOK, sc
		}
	}
	row := row{tenant: tenant, method: http.MethodPost, headers: map[string]string{}, timeout: DefaultTimeout, retries: DefaultRetries, catchUp: CatchUpSkip}
	if in.Timeout == nil && in.Period != nil {
		if p, err := ParsePeriod(*in.Period); err == nil && p != Monthly && DefaultTimeout > p/2 {
			row.timeout = p / 2
		}
	}
	if e := s.apply(r.Context(), &row, in, true); e != nil {
		return 0, e
	}
	id, err := uuid.NewRandom()
	if err != nil {
		return internal(err)
	}
	tx, err := s.cfg.Pool.Begin(r.Context())
	if err != nil {
		return internal(err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(r.Context())) }()
	if e := s.chargeTenant(r.Context(), tx, tenant, 1, row.period.Milliseconds(), 0); e != nil {
		return 0, e
	}
	var pausedReason *string
	if row.paused {
		why := PausedByRequest
		pausedReason = &why
	}
	rows, err := tx.Query(r.Context(), `INSERT INTO `+s.schedules+` (id, tenant_id, external_id, url, method, headers, body, period_ms, timeout_ms, retries, upstream, paused, catch_up, paused_reason)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14) RETURNING `+scheduleColumns,
		id, tenant, in.ExternalID, row.url, row.method, row.headers, row.body, row.period.Milliseconds(), row.timeout.Milliseconds(), row.retries, row.upstream, row.paused, row.catchUp, pausedReason)
	if err != nil {
		return internal(err)
	}
	sc, err := pgx.CollectExactlyOneRow(rows, s.scan)
	if isUniqueViolation(err) && in.ExternalID != nil {
		// A create of the same external_id committed meanwhile: its
		// schedule is the answer, and this one's charge is undone.
		_ = tx.Rollback(r.Context())
		sc, found, err := s.byExternalID(r.Context(), s.cfg.Pool, tenant, *in.ExternalID)
		if err != nil || !found {
			return internal(fmt.Errorf("schedule of external_id %q neither made nor found: %v", *in.ExternalID, err))
		}
		return http.StatusOK, sc
	}
	if err != nil {
		return internal(err)
	}
	if err := tx.Commit(r.Context()); err != nil {
		return internal(err)
	}
	s.placeCommitted(&sc)
	w.Header().Set("Location", "/v1/schedules/"+sc.ID.String())
	return http.StatusCreated, sc
}

// byExternalID returns tenant's schedule (not deleted) of externalID.
func (s *Server) byExternalID(ctx context.Context, db interface {
	Query(context.Context, string, ...any) (pgx.Rows, error)
}, tenant uuid.UUID, externalID string,
) (Schedule, bool, error) {
	rows, err := db.Query(ctx, `SELECT `+scheduleColumns+` FROM `+s.schedules+` WHERE tenant_id = $1 AND external_id = $2 AND deleted_at IS NULL`, tenant, externalID)
	if err != nil {
		return Schedule{}, false, err
	}
	sc, err := pgx.CollectExactlyOneRow(rows, s.scan)
	if errors.Is(err, pgx.ErrNoRows) {
		return Schedule{}, false, nil
	}
	return sc, err == nil, err
}

func (s *Server) list(_ http.ResponseWriter, r *http.Request) (int, any) {
	if err := s.readBegun(r.Context()); err != nil {
		return internal(err)
	}
	q := r.URL.Query()
	limit := 100
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 1000 {
			return 0, badField("limit", "must be between 1 and 1000, got %q", v)
		}
		limit = n
	}
	after := uuid.Nil
	if v := q.Get("after"); v != "" {
		id, err := uuid.Parse(v)
		if err != nil {
			return 0, badField("after", "must be the id of the last schedule of the previous page (its \"next\"), got %q", v)
		}
		after = id
	}
	var periodMS *int64
	if v := q.Get("period"); v != "" {
		p, err := ParsePeriod(v)
		if err != nil {
			return 0, badField("period", "%v", err)
		}
		ms := p.Milliseconds()
		periodMS = &ms
	}
	var paused *bool
	if v := q.Get("paused"); v != "" {
		b, err := strconv.ParseBool(v)
		if err != nil {
			return 0, badField("paused", "must be true or false, got %q", v)
		}
		paused = &b
	}
	var upstream *string
	if v := q.Get("upstream"); v != "" {
		upstream = &v
	}
	// Only the filters given, so that the plan is the primary key's range
	// (a generic plan of "$n IS NULL OR col = $n" sorted the whole table:
	// 31 ms a page at 100,000 schedules).
	where, args := []string{"id > $1"}, []any{after}
	add := func(cond string, v any) {
		args = append(args, v)
		where = append(where, fmt.Sprintf(cond, len(args)))
	}
	if p := principalOf(r); p.Scope != ScopeAdmin {
		add("tenant_id = $%d", p.Tenant)
	} else if v := q.Get("tenant"); v != "" {
		id, err := uuid.Parse(v)
		if err != nil {
			return 0, badField("tenant", "must be a tenant's id, got %q", v)
		}
		add("tenant_id = $%d", id)
	}
	if periodMS != nil {
		add("period_ms = $%d", *periodMS)
	}
	if paused != nil {
		add("paused = $%d", *paused)
	}
	if upstream != nil {
		add("upstream = $%d", *upstream)
	}
	if q.Get("deleted") == "true" {
		where = append(where, "deleted_at IS NOT NULL")
	} else {
		where = append(where, "deleted_at IS NULL")
	}
	args = append(args, limit)
	rows, err := s.cfg.Pool.Query(r.Context(), `SELECT `+scheduleColumns+` FROM `+s.schedules+`
WHERE `+strings.Join(where, " AND ")+` ORDER BY id LIMIT $`+strconv.Itoa(len(args)), args...)
	if err != nil {
		return internal(err)
	}
	list, err := pgx.CollectRows(rows, s.scan)
	if err != nil {
		return internal(err)
	}
	if err := s.health(r.Context(), list); err != nil {
		return internal(err)
	}
	page := struct {
		Schedules []Schedule `json:"schedules"`
		Next      *uuid.UUID `json:"next"`
	}{Schedules: list}
	if len(list) == limit {
		page.Next = &list[len(list)-1].ID
	}
	return http.StatusOK, page
}

func pathID(r *http.Request) (uuid.UUID, *apiError) {
	id, err := uuid.Parse(r.PathValue("id"))
	if err != nil {
		return uuid.Nil, &apiError{status: http.StatusNotFound, Field: "id", Error: fmt.Sprintf("no schedule %q: ids are UUIDs", r.PathValue("id"))}
	}
	return id, nil
}

func notFound(id uuid.UUID) *apiError {
	return &apiError{status: http.StatusNotFound, Field: "id", Error: fmt.Sprintf("no schedule %s (deleted schedules stay readable for the server's history)", id)}
}

func (s *Server) get(_ http.ResponseWriter, r *http.Request) (int, any) {
	if err := s.readBegun(r.Context()); err != nil {
		return internal(err)
	}
	id, e := pathID(r)
	if e != nil {
		return 0, e
	}
	rows, err := s.cfg.Pool.Query(r.Context(), `SELECT `+scheduleColumns+` FROM `+s.schedules+` WHERE id = $1 AND ($2::uuid IS NULL OR tenant_id = $2)`, id, principalOf(r).tenantFilter())
	if err != nil {
		return internal(err)
	}
	sc, err := pgx.CollectExactlyOneRow(rows, s.scan)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, notFound(id)
	}
	if err != nil {
		return internal(err)
	}
	calls, err := s.cfg.Pool.Query(r.Context(), `SELECT started_at, due_at, lateness_ms / 1000, attempt, status, latency_ms / 1000, ok, error, missed, triggered FROM `+s.calls+`
WHERE schedule_id = $1 ORDER BY started_at DESC LIMIT 20`, id)
	if err != nil {
		return internal(err)
	}
	sc.LastCalls, err = pgx.CollectRows(calls, func(row pgx.CollectableRow) (Call, error) {
		var c Call
		err := row.Scan(&c.StartedAt, &c.DueAt, &c.LatenessSeconds, &c.Attempt, &c.Status, &c.LatencySeconds, &c.OK, &c.Error, &c.Missed, &c.Triggered)
		return c, err
	})
	if err != nil {
		return internal(err)
	}
	if sc.LastCalls == nil {
		sc.LastCalls = []Call{}
	}
	one := []Schedule{sc}
	if err := s.health(r.Context(), one); err != nil {
		return internal(err)
	}
	return http.StatusOK, one[0]
}

func (s *Server) patch(_ http.ResponseWriter, r *http.Request) (int, any) {
	if err := s.readBegun(r.Context()); err != nil {
		return internal(err)
	}
	id, e := pathID(r)
	if e != nil {
		return 0, e
	}
	var in input
	if e := decode(r, &in); e != nil {
		return 0, e
	}
	tx, err := s.cfg.Pool.Begin(r.Context())
	if err != nil {
		return internal(err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(r.Context())) }()
	var (
		cur                 row
		periodMS, timeoutMS int64
	)
	err = tx.QueryRow(r.Context(), `SELECT tenant_id, url, method, headers, body, period_ms, timeout_ms, retries, upstream, paused, catch_up FROM `+s.schedules+`
WHERE id = $1 AND deleted_at IS NULL AND ($2::uuid IS NULL OR tenant_id = $2) FOR UPDATE`, id, principalOf(r).tenantFilter()).
		Scan(&cur.tenant, &cur.url, &cur.method, &cur.headers, &cur.body, &periodMS, &timeoutMS, &cur.retries, &cur.upstream, &cur.paused, &cur.catchUp)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, notFound(id)
	}
	if err != nil {
		return internal(err)
	}
	cur.period, cur.timeout = time.Duration(periodMS)*time.Millisecond, time.Duration(timeoutMS)*time.Millisecond
	if in.Tenant != nil || in.ExternalID != nil {
		return 0, badField(map[bool]string{true: "tenant", false: "external_id"}[in.Tenant != nil], "is set when the schedule is made and never changes")
	}
	if e := s.apply(r.Context(), &cur, in, false); e != nil {
		return 0, e
	}
	if cur.period != time.Duration(periodMS)*time.Millisecond {
		if e := s.chargeTenant(r.Context(), tx, cur.tenant, 0, cur.period.Milliseconds(), periodMS); e != nil {
			return 0, e
		}
	}
	rows, err := tx.Query(r.Context(), `UPDATE `+s.schedules+` SET url = $2, method = $3, headers = $4, body = $5, period_ms = $6, timeout_ms = $7, retries = $8,
	upstream = $9, paused = $10, catch_up = $11, updated_at = clock_timestamp(),
	-- resumed: no reason; paused now: this request; still paused: the reason it had
	paused_reason = CASE WHEN NOT $10 THEN NULL WHEN paused THEN paused_reason ELSE $12 END
WHERE id = $1 RETURNING `+scheduleColumns,
		id, cur.url, cur.method, cur.headers, cur.body, cur.period.Milliseconds(), cur.timeout.Milliseconds(), cur.retries, cur.upstream, cur.paused, cur.catchUp, PausedByRequest)
	if err != nil {
		return internal(err)
	}
	sc, err := pgx.CollectExactlyOneRow(rows, s.scan)
	if err != nil {
		return internal(err)
	}
	if err := tx.Commit(r.Context()); err != nil {
		return internal(err)
	}
	s.placeCommitted(&sc)
	return http.StatusOK, sc
}

// placeCommitted places a schedule again once the change that made it is
// committed: whether its slot's fan-out has begun (slotStarted) is read
// after the commit, so that a fan-out that has not begun then is sure to
// select it.
func (s *Server) placeCommitted(sc *Schedule) {
	if period, err := ParsePeriod(sc.Period); err == nil {
		s.place(sc, period, time.Now(), true)
	}
}

func (s *Server) delete(_ http.ResponseWriter, r *http.Request) (int, any) {
	id, e := pathID(r)
	if e != nil {
		return 0, e
	}
	tx, err := s.cfg.Pool.Begin(r.Context())
	if err != nil {
		return internal(err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(r.Context())) }()
	var (
		tenant   uuid.UUID
		periodMS int64
	)
	err = tx.QueryRow(r.Context(), `UPDATE `+s.schedules+` SET deleted_at = clock_timestamp(), updated_at = clock_timestamp()
WHERE id = $1 AND deleted_at IS NULL AND ($2::uuid IS NULL OR tenant_id = $2) RETURNING tenant_id, period_ms`, id, principalOf(r).tenantFilter()).Scan(&tenant, &periodMS)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, notFound(id)
	}
	if err != nil {
		return internal(err)
	}
	if e := s.chargeTenant(r.Context(), tx, tenant, -1, periodMS, 0); e != nil && e.status != http.StatusNotFound {
		return 0, e
	}
	if err := tx.Commit(r.Context()); err != nil {
		return internal(err)
	}
	return http.StatusOK, map[string]any{"id": id, "deleted": true, "history_kept": s.cfg.History.String()}
}

func (s *Server) stats(_ http.ResponseWriter, r *http.Request) (int, any) {
	unit := r.URL.Query().Get("granularity")
	if unit == "" {
		unit = "minute"
	}
	if unit != "second" && unit != "minute" && unit != "hour" {
		return 0, badField("granularity", "must be second, minute or hour, got %q", unit)
	}
	// A tenant's token sees its tenant's calls; an admin's every call, or
	// the ?tenant= one's.
	tenant := principalOf(r).tenantFilter()
	if v := r.URL.Query().Get("tenant"); v != "" && tenant == nil {
		id, err := uuid.Parse(v)
		if err != nil {
			return 0, badField("tenant", "must be a tenant's id, got %q", v)
		}
		tenant = &id
	}
	// The last 60 units.
	span := map[string]time.Duration{"second": time.Minute, "minute": time.Hour, "hour": 60 * time.Hour}[unit]
	rows, err := s.cfg.Pool.Query(r.Context(), `SELECT date_trunc($1, started_at) AS at, count(*) FILTER (WHERE missed IS NULL), count(*) FILTER (WHERE missed IS NULL AND NOT ok),
	count(*) FILTER (WHERE missed IS NOT NULL), count(*) FILTER (WHERE triggered),
	percentile_cont(0.99) WITHIN GROUP (ORDER BY lateness_ms) / 1000
FROM `+s.calls+` WHERE started_at >= clock_timestamp() - $2 * interval '1 millisecond' AND ($3::uuid IS NULL OR tenant_id = $3)
GROUP BY 1 ORDER BY 1`, unit, span.Milliseconds(), tenant)
	if err != nil {
		return internal(err)
	}
	type point struct {
		At                 time.Time `json:"at"`
		Calls              int64     `json:"calls"`
		Failures           int64     `json:"failures"`
		Missed             int64     `json:"missed"`
		Triggered          int64     `json:"triggered"`
		LatenessP99Seconds *float64  `json:"lateness_p99_seconds"`
	}
	points, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (point, error) {
		var p point
		err := row.Scan(&p.At, &p.Calls, &p.Failures, &p.Missed, &p.Triggered, &p.LatenessP99Seconds)
		return p, err
	})
	if err != nil {
		return internal(err)
	}
	if points == nil {
		points = []point{}
	}
	return http.StatusOK, map[string]any{"granularity": unit, "points": points}
}
