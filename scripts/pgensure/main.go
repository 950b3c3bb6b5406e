// Command pgensure is scripts/pg.sh's database client, so that getting a
// PostgreSQL for make test / demo / bench needs no psql on the machine.
//
//	pgensure check URL        exit 0 if the server at URL answers (any database)
//	pgensure create URL NAME  create database NAME on that server if missing
//	pgensure maxconns URL     print the server's max_connections
package main

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/jackc/pgx/v5"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "pgensure:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	if len(args) < 2 {
		return fmt.Errorf("usage: pgensure check URL | pgensure create URL NAME | pgensure maxconns URL")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, args[1])
	if err != nil {
		return err
	}
	defer conn.Close(ctx)

	switch args[0] {
	case "check":
		return conn.Ping(ctx)
	case "maxconns":
		var n string
		if err := conn.QueryRow(ctx, "SHOW max_connections").Scan(&n); err != nil {
			return err
		}
		fmt.Println(n)
		return nil
	case "create":
		if len(args) != 3 {
			return fmt.Errorf("usage: pgensure create URL NAME")
		}
		var exists bool
		if err := conn.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)", args[2]).Scan(&exists); err != nil {
			return err
		}
		if exists {
			return nil
		}
		fmt.Fprintf(os.Stderr, "pg: creating database %s\n", args[2])
		_, err := conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{args[2]}.Sanitize())
		return err
	}
	return fmt.Errorf("unknown command %q", args[0])
}
