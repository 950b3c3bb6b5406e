// Package integration runs riverslot end to end against a real
// PostgreSQL and real River clients: full compressed cycles, retries of an
// interrupted fan-out, several tasks on one client, and account churn.
package integration
