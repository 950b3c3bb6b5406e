package serve

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	_ "embed"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

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

// Schedule is a schedule as the API reads and writes it.
type Schedule struct {
	ID       uuid.UUID         `json:"id"`
	URL      string            `json:"url"`
	Method   string            `json:"method"`
	Headers  map[string]string `json:"headers"`
	Body     string            `json:"body"`
	Period   string            `json:"period"`
	Timeout  string            `json:"timeout"`
	Retries  int               `json:"retries"`
	Upstream string            `json:"upstream"`
	Paused   bool              `json:"paused"`
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
	// "never_called", "paused" or "deleted".
	Status string `json:"status"`
	// LastCall is its latest call (a retry counts).
	LastCall *Call `json:"last_call,omitempty"`
	// RecentFailures counts the failed calls among its last 10.
	RecentFailures int `json:"recent_failures"`
}

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
}

// input is a create or a change: nil fields are not given.
type input struct {
	URL      *string            `json:"url"`
	Method   *string            `json:"method"`
	Headers  *map[string]string `json:"headers"`
	Body     *string            `json:"body"`
	Period   *string            `json:"period"`
	Timeout  *string            `json:"timeout"`
	Retries  *int               `json:"retries"`
	Upstream *string            `json:"upstream"`
	Paused   *bool              `json:"paused"`
}

// apiError is a 4xx answer: the field at fault and how to fix it.
type apiError struct {
	status int
	// cause is an internal error: logged under a request id, never sent.
	cause error
	Field string `json:"field,omitempty"`
	Error string `json:"error"`
}

func badField(field, format string, args ...any) *apiError {
	return &apiError{status: http.StatusBadRequest, Field: field, Error: field + " " + fmt.Sprintf(format, args...)}
}

// Handler is the service's HTTP API (/v1/...); every endpoint but the
// OpenAPI document and the operator's page (/v1/page, which asks for a
// token and reads the API with it) needs a token.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/openapi.json", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(openAPI)
	})
	mux.HandleFunc("GET /v1/page", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		w.Header().Set("Content-Security-Policy", "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; connect-src 'self'; form-action 'none'; frame-ancestors 'none'")
		w.Header().Set("X-Content-Type-Options", "nosniff")
		w.Header().Set("Referrer-Policy", "no-referrer")
		_, _ = w.Write(page)
	})
	auth := func(h func(http.ResponseWriter, *http.Request) (int, any)) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			if !s.authorized(r) {
				w.Header().Set("WWW-Authenticate", `Bearer realm="riverslot"`)
				s.writeJSON(w, r, http.StatusUnauthorized, &apiError{Error: "a valid token is required: Authorization: Bearer <token> (riverslot serve --token-file writes one)"})
				return
			}
			r.Body = http.MaxBytesReader(w, r.Body, MaxRequestBytes)
			status, v := h(w, r)
			if e, ok := v.(*apiError); ok && e.status != 0 {
				status = e.status
			}
			s.writeJSON(w, r, status, v)
		}
	}
	mux.HandleFunc("POST /v1/schedules", auth(s.create))
	mux.HandleFunc("GET /v1/schedules", auth(s.list))
	mux.HandleFunc("GET /v1/schedules/{id}", auth(s.get))
	mux.HandleFunc("PATCH /v1/schedules/{id}", auth(s.patch))
	mux.HandleFunc("DELETE /v1/schedules/{id}", auth(s.delete))
	mux.HandleFunc("POST /v1/tokens", auth(s.newToken))
	mux.HandleFunc("GET /v1/tokens", auth(s.listTokens))
	mux.HandleFunc("DELETE /v1/tokens/{id}", auth(s.deleteToken))
	mux.HandleFunc("GET /v1/stats", auth(s.stats))
	mux.HandleFunc("GET /v1/signing-secret", auth(s.apiSigningSecret))
	return mux
}

// writeJSON answers status with v (httpjson.Write). An internal error
// (an apiError with a cause) is logged under a request id, and the answer
// names only the id: the database's error text never reaches a client.
func (s *Server) writeJSON(w http.ResponseWriter, r *http.Request, status int, v any) {
	if e, ok := v.(*apiError); ok && e.cause != nil {
		id := httpjson.Logged(r.Context(), s.cfg.Logger, r, "riverslot serve: request failed", e.cause)
		e.Error = "internal error (request " + id + "); the server's log has the cause under request_id " + id
	}
	if err := httpjson.Write(w, status, v); err != nil {
		id := httpjson.Logged(r.Context(), s.cfg.Logger, r, "riverslot serve: error encoding the answer", err)
		httpjson.Error(w, http.StatusInternalServerError, "internal error (request "+id+")")
	}
}

// internal answers 500 for err, an error of the server's own (the
// database's, say): writeJSON logs it and sends only a request id.
func internal(err error) (int, any) {
	return http.StatusInternalServerError, &apiError{status: http.StatusInternalServerError, cause: err}
}

// decode reads a JSON object into v, refusing unknown fields.
func decode(r *http.Request, v any) *apiError {
	dec := json.NewDecoder(r.Body)
	dec.DisallowUnknownFields()
	err := dec.Decode(v)
	if err == nil && dec.More() {
		err = errors.New("data after the JSON object")
	}
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			return &apiError{status: http.StatusRequestEntityTooLarge, Error: fmt.Sprintf("the request is over %d bytes", MaxRequestBytes)}
		}
		return &apiError{status: http.StatusBadRequest, Error: "the request is not one JSON object of a schedule's fields: " + err.Error()}
	}
	return nil
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
	url, method, body, upstream string
	headers                     map[string]string
	period, timeout             time.Duration
	retries                     int
	paused                      bool
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
			return badField("url", "%v", err)
		}
		// The upstream key stays the URL's host (and the sub-key it had):
		// a new URL moves the schedule to its new host's limits.
		_, sub, _ := strings.Cut(r.upstream, "/")
		r.url, r.upstream = u.String(), upstreamKey(u, sub)
	}
	if in.Upstream != nil {
		// A sub-key within the URL's host: a schedule can share or split
		// its own host's limits, not pause another host's schedules.
		sub := *in.Upstream
		if host, _, _ := strings.Cut(r.upstream, "/"); strings.EqualFold(sub, host) || strings.EqualFold(sub, hostOnly(host)) {
			sub = ""
		}
		if len(sub) > 64 || strings.Contains(sub, "/") || !validHeaderValue(sub) {
			return badField("upstream", "must be a sub-key of at most 64 printable bytes without \"/\" (limits count per host/sub-key; \"\" or the host: the host's own), got %q", *in.Upstream)
		}
		host, _, _ := strings.Cut(r.upstream, "/")
		r.upstream = host
		if sub != "" {
			r.upstream += "/" + sub
		}
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
	if in.Paused != nil {
		r.paused = *in.Paused
	}
	return nil
}

// hostOnly is key's host without its port ("api.example.com:443" →
// "api.example.com"), key itself when it has none.
func hostOnly(key string) string {
	if h, _, err := net.SplitHostPort(key); err == nil {
		return h
	}
	return key
}

// upstreamKey is the limiter's key of a schedule: its URL's host and
// port (the scheme's default when the URL names none: two services on one
// host are two upstreams, and one's 429 does not pause the other's
// schedules), and its sub-key after a "/" when it has one.
func upstreamKey(u *url.URL, sub string) string {
	port := u.Port()
	if port == "" {
		port = map[string]string{"http": "80", "https": "443"}[u.Scheme]
	}
	host := strings.ToLower(net.JoinHostPort(u.Hostname(), port))
	if sub == "" {
		return host
	}
	return host + "/" + sub
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

const scheduleColumns = `id, url, method, headers, body, period_ms, timeout_ms, retries, upstream, paused, created_at, updated_at, deleted_at`

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
	if err := rows.Scan(&sc.ID, &url, &method, &headers, &body, &periodMS, &timeoutMS, &sc.Retries, &u, &sc.Paused, &created, &updated, &deleted); err != nil {
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
	s.place(&sc, period, time.Now())
	return sc, nil
}

// place fills the schedule's offset and next calls (none while paused or
// deleted): a period whose fan-out for the schedule's slot has already run
// is skipped, as the schedule was not there to be selected.
func (s *Server) place(sc *Schedule, period time.Duration, now time.Time) {
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
		due := info.Due(c, sc.ID)
		if info.SlotStartOf(c, sc.ID).Add(-info.Lead).After(now) {
			sc.NextCalls = append(sc.NextCalls, due.UTC())
		}
	}
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
	rows, err := s.cfg.Pool.Query(ctx, `SELECT s.id, c.started_at, c.due_at, c.lateness_ms / 1000, c.attempt, c.status, c.latency_ms / 1000, c.ok, c.error,
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
	_, err = pgx.ForEachRow(rows, []any{&id, &started, &c.DueAt, &c.LatenessSeconds, &attempt, &c.Status, &latency, &ok, &c.Error, &failures}, func() error {
		h := &Health{RecentFailures: failures, Status: "never_called"}
		if started != nil {
			call := c
			call.StartedAt, call.Attempt, call.LatencySeconds, call.OK = *started, *attempt, *latency, *ok
			h.LastCall = &call
			h.Status = "ok"
			if !call.OK {
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

func (s *Server) create(w http.ResponseWriter, r *http.Request) (int, any) {
	var in input
	if e := decode(r, &in); e != nil {
		return 0, e
	}
	row := row{method: http.MethodPost, headers: map[string]string{}, timeout: DefaultTimeout, retries: DefaultRetries}
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
	rows, err := s.cfg.Pool.Query(r.Context(), `INSERT INTO `+s.schedules+` (id, url, method, headers, body, period_ms, timeout_ms, retries, upstream, paused)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10) RETURNING `+scheduleColumns,
		id, row.url, row.method, row.headers, row.body, row.period.Milliseconds(), row.timeout.Milliseconds(), row.retries, row.upstream, row.paused)
	if err != nil {
		return internal(err)
	}
	sc, err := pgx.CollectExactlyOneRow(rows, s.scan)
	if err != nil {
		return internal(err)
	}
	w.Header().Set("Location", "/v1/schedules/"+sc.ID.String())
	return http.StatusCreated, sc
}

func (s *Server) list(_ http.ResponseWriter, r *http.Request) (int, any) {
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
	id, e := pathID(r)
	if e != nil {
		return 0, e
	}
	rows, err := s.cfg.Pool.Query(r.Context(), `SELECT `+scheduleColumns+` FROM `+s.schedules+` WHERE id = $1`, id)
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
	calls, err := s.cfg.Pool.Query(r.Context(), `SELECT started_at, due_at, lateness_ms / 1000, attempt, status, latency_ms / 1000, ok, error FROM `+s.calls+`
WHERE schedule_id = $1 ORDER BY started_at DESC LIMIT 20`, id)
	if err != nil {
		return internal(err)
	}
	sc.LastCalls, err = pgx.CollectRows(calls, func(row pgx.CollectableRow) (Call, error) {
		var c Call
		err := row.Scan(&c.StartedAt, &c.DueAt, &c.LatenessSeconds, &c.Attempt, &c.Status, &c.LatencySeconds, &c.OK, &c.Error)
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
	err = tx.QueryRow(r.Context(), `SELECT url, method, headers, body, period_ms, timeout_ms, retries, upstream, paused FROM `+s.schedules+`
WHERE id = $1 AND deleted_at IS NULL FOR UPDATE`, id).Scan(&cur.url, &cur.method, &cur.headers, &cur.body, &periodMS, &timeoutMS, &cur.retries, &cur.upstream, &cur.paused)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, notFound(id)
	}
	if err != nil {
		return internal(err)
	}
	cur.period, cur.timeout = time.Duration(periodMS)*time.Millisecond, time.Duration(timeoutMS)*time.Millisecond
	if e := s.apply(r.Context(), &cur, in, false); e != nil {
		return 0, e
	}
	rows, err := tx.Query(r.Context(), `UPDATE `+s.schedules+` SET url = $2, method = $3, headers = $4, body = $5, period_ms = $6, timeout_ms = $7, retries = $8,
	upstream = $9, paused = $10, updated_at = clock_timestamp() WHERE id = $1 RETURNING `+scheduleColumns,
		id, cur.url, cur.method, cur.headers, cur.body, cur.period.Milliseconds(), cur.timeout.Milliseconds(), cur.retries, cur.upstream, cur.paused)
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
	return http.StatusOK, sc
}

func (s *Server) delete(_ http.ResponseWriter, r *http.Request) (int, any) {
	id, e := pathID(r)
	if e != nil {
		return 0, e
	}
	tag, err := s.cfg.Pool.Exec(r.Context(), `UPDATE `+s.schedules+` SET deleted_at = clock_timestamp(), updated_at = clock_timestamp() WHERE id = $1 AND deleted_at IS NULL`, id)
	if err != nil {
		return internal(err)
	}
	if tag.RowsAffected() == 0 {
		return 0, notFound(id)
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
	// The last 60 units.
	span := map[string]time.Duration{"second": time.Minute, "minute": time.Hour, "hour": 60 * time.Hour}[unit]
	rows, err := s.cfg.Pool.Query(r.Context(), `SELECT date_trunc($1, started_at) AS at, count(*), count(*) FILTER (WHERE NOT ok),
	percentile_cont(0.99) WITHIN GROUP (ORDER BY lateness_ms) / 1000
FROM `+s.calls+` WHERE started_at >= clock_timestamp() - $2 * interval '1 millisecond' GROUP BY 1 ORDER BY 1`, unit, span.Milliseconds())
	if err != nil {
		return internal(err)
	}
	type point struct {
		At                 time.Time `json:"at"`
		Calls              int64     `json:"calls"`
		Failures           int64     `json:"failures"`
		LatenessP99Seconds *float64  `json:"lateness_p99_seconds"`
	}
	points, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (point, error) {
		var p point
		err := row.Scan(&p.At, &p.Calls, &p.Failures, &p.LatenessP99Seconds)
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

// Tokens are 32 random bytes, hex, prefixed "rs_"; the server keeps their
// SHA-256 only.
func newTokenValue() (string, error) {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	return "rs_" + hex.EncodeToString(b), nil
}

func tokenHash(token string) []byte {
	h := sha256.Sum256([]byte(token))
	return h[:]
}

// authCacheFor is how long a token found valid is trusted without a query:
// a revoked token stops working within it.
const authCacheFor = 10 * time.Second

func (s *Server) authorized(r *http.Request) bool {
	scheme, token, ok := strings.Cut(r.Header.Get("Authorization"), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") || token == "" || len(token) > 256 {
		return false
	}
	hash := tokenHash(token)
	key := string(hash)
	s.authMu.Lock()
	expires, cached := s.authOK[key]
	s.authMu.Unlock()
	if cached && time.Now().Before(expires) {
		return true
	}
	if !s.lookups.allow() {
		return false // too many lookups of unknown tokens: refused without a query
	}
	var found bool
	err := s.cfg.Pool.QueryRow(r.Context(), `SELECT EXISTS (SELECT 1 FROM `+s.tokens+` WHERE hash = $1)`, hash).Scan(&found)
	if err != nil || !found {
		s.lookups.failed()
		return false
	}
	s.authMu.Lock()
	if s.authOK == nil || len(s.authOK) > 10_000 {
		s.authOK = map[string]time.Time{}
	}
	s.authOK[key] = time.Now().Add(authCacheFor)
	s.authMu.Unlock()
	return true
}

// lookupBudget bounds the token lookups that find nothing: after
// failedLookupsPerSecond a second (a burst of as many), unknown tokens are
// refused without a query until the budget refills, so that requests with
// made-up tokens cannot take the pool the calls need. Known tokens are
// served from the cache meanwhile; a valid token not yet cached may be
// refused (401) while the budget is spent.
type lookupBudget struct {
	mu     sync.Mutex
	tokens float64
	at     time.Time
}

const failedLookupsPerSecond = 20

func (b *lookupBudget) refill() {
	now := time.Now()
	if b.at.IsZero() {
		b.tokens = failedLookupsPerSecond
	} else {
		b.tokens = min(failedLookupsPerSecond, b.tokens+now.Sub(b.at).Seconds()*failedLookupsPerSecond)
	}
	b.at = now
}

func (b *lookupBudget) allow() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.refill()
	return b.tokens >= 1
}

func (b *lookupBudget) failed() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.refill()
	b.tokens--
}

// tokenInfo is a token as GET /v1/tokens lists it (never the token).
type tokenInfo struct {
	ID        int64     `json:"id"`
	Name      string    `json:"name"`
	CreatedAt time.Time `json:"created_at"`
}

func (s *Server) listTokens(_ http.ResponseWriter, r *http.Request) (int, any) {
	rows, err := s.cfg.Pool.Query(r.Context(), `SELECT id, name, created_at FROM `+s.tokens+` ORDER BY id`)
	if err != nil {
		return internal(err)
	}
	list, err := pgx.CollectRows(rows, pgx.RowToStructByPos[tokenInfo])
	if err != nil {
		return internal(err)
	}
	return http.StatusOK, map[string]any{"tokens": list}
}

func (s *Server) deleteToken(_ http.ResponseWriter, r *http.Request) (int, any) {
	id, err := strconv.ParseInt(r.PathValue("id"), 10, 64)
	if err != nil {
		return 0, &apiError{status: http.StatusNotFound, Field: "id", Error: fmt.Sprintf("no token %q: ids are the numbers GET /v1/tokens lists", r.PathValue("id"))}
	}
	tag, err := s.cfg.Pool.Exec(r.Context(), `DELETE FROM `+s.tokens+` WHERE id = $1`, id)
	if err != nil {
		return internal(err)
	}
	if tag.RowsAffected() == 0 {
		return 0, &apiError{status: http.StatusNotFound, Field: "id", Error: fmt.Sprintf("no token %d", id)}
	}
	s.authMu.Lock()
	s.authOK = nil // every process forgets within authCacheFor; this one at once
	s.authMu.Unlock()
	return http.StatusOK, map[string]any{"id": id, "deleted": true}
}

func (s *Server) newToken(_ http.ResponseWriter, r *http.Request) (int, any) {
	var in struct {
		Name string `json:"name"`
	}
	if r.ContentLength != 0 {
		if e := decode(r, &in); e != nil {
			return 0, e
		}
	}
	if len(in.Name) > 200 {
		return 0, badField("name", "must be at most 200 bytes")
	}
	token, err := s.AddToken(r.Context(), in.Name)
	if err != nil {
		return internal(err)
	}
	return http.StatusCreated, map[string]string{"token": token, "name": in.Name, "note": "shown once; the server keeps only its hash"}
}

// AddToken makes a new token named name and returns it.
func (s *Server) AddToken(ctx context.Context, name string) (string, error) {
	token, err := newTokenValue()
	if err != nil {
		return "", err
	}
	_, err = s.cfg.Pool.Exec(ctx, `INSERT INTO `+s.tokens+` (hash, name) VALUES ($1, $2)`, tokenHash(token), name)
	return token, err
}

// TokenFile makes sure the token in path is accepted: when the file is
// missing, it writes a new random token there (mode 0600); either way the
// token's hash is stored. It reports whether it wrote the file.
func (s *Server) TokenFile(ctx context.Context, path string) (bool, error) {
	b, err := os.ReadFile(path)
	created := false
	var token string
	switch {
	case errors.Is(err, os.ErrNotExist):
		if token, err = newTokenValue(); err != nil {
			return false, err
		}
		f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
		if errors.Is(err, os.ErrExist) {
			// Another process on this host wrote it first: accept its token
			// once it is complete.
			time.Sleep(100 * time.Millisecond)
			return s.TokenFile(ctx, path)
		}
		if err != nil {
			return false, fmt.Errorf("--token-file: %w", err)
		}
		if _, err := f.WriteString(token + "\n"); err != nil {
			_ = f.Close()
			return false, fmt.Errorf("--token-file: %w", err)
		}
		if err := f.Close(); err != nil {
			return false, fmt.Errorf("--token-file: %w", err)
		}
		created = true
	case err != nil:
		return false, fmt.Errorf("--token-file: %w", err)
	default:
		token = strings.TrimSpace(string(b))
		if len(token) < 16 {
			return false, fmt.Errorf("--token-file %s holds a token of %d characters; tokens are at least 16 (delete the file for a new one)", path, len(token))
		}
	}
	_, err = s.cfg.Pool.Exec(ctx, `INSERT INTO `+s.tokens+` (hash, name) VALUES ($1, 'token-file') ON CONFLICT (hash) DO NOTHING`, tokenHash(token))
	return created, err
}
