package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/ordertimeout/ordertimeout/examples/reservations"
)

// TestReservationsExample runs the example service examples/reservations
// against the built stack (timeoutd accepting its fire subjects) and
// drives it over its HTTP API: a reservation left alone expires, not
// before its deadline; a confirmed one never does; an extended one
// outlives its first deadline and expires at its second; a bad request is
// refused.
func TestReservationsExample(t *testing.T) {
	t.Parallel()
	s := startStack(t, stackOptions{})
	ctx, cancel := context.WithCancel(context.Background())
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		done <- reservations.Run(ctx, reservations.Config{
			DatabaseURL: "postgres://postgres:postgres@" + s.hostPort(svcPostgres) + "/reservations?sslmode=disable",
			NATSURL:     s.NATSURL,
			Listener:    l,
			Logger:      slog.New(slog.NewTextHandler(testWriter{t}, nil)),
		})
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("reservations.Run: %v", err)
			}
		case <-time.After(15 * time.Second):
			t.Error("reservations.Run did not return")
		}
	})
	root := "http://" + l.Addr().String()
	call := func(method, path, body string, want int) reservations.Reservation {
		t.Helper()
		req, err := http.NewRequestWithContext(ctx, method, root+path, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var buf bytes.Buffer
		_, _ = buf.ReadFrom(resp.Body)
		if resp.StatusCode != want {
			t.Fatalf("%s %s: %d %s, want %d", method, path, resp.StatusCode, buf.String(), want)
		}
		var r reservations.Reservation
		if want < 300 {
			if err := json.Unmarshal(buf.Bytes(), &r); err != nil {
				t.Fatal(err)
			}
		}
		return r
	}
	// The service may still be migrating: retry the first request.
	var left reservations.Reservation
	for deadline := time.Now().Add(30 * time.Second); ; {
		resp, err := http.Post(root+"/reservations", "application/json", strings.NewReader(`{"sku":"A-1","qty":2,"ttl":"2s"}`))
		if err == nil {
			err = json.NewDecoder(resp.Body).Decode(&left)
			resp.Body.Close()
			if err == nil && resp.StatusCode != http.StatusCreated {
				err = errors.New(resp.Status)
			}
		}
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("first reservation: %v", err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	confirmed := call("POST", "/reservations", `{"sku":"A-1","qty":1,"ttl":"2s"}`, http.StatusCreated)
	call("POST", "/reservations/"+confirmed.ID+"/confirm", "", http.StatusOK)
	first := call("POST", "/reservations", `{"sku":"B-2","qty":1,"ttl":"2s"}`, http.StatusCreated)
	extended := call("POST", "/reservations/"+first.ID+"/extend", `{"ttl":"6s"}`, http.StatusOK)
	call("POST", "/reservations", `{"sku":"A-1","qty":0,"ttl":"2s"}`, http.StatusBadRequest)
	call("POST", "/reservations/"+confirmed.ID+"/extend", `{"ttl":"1m"}`, http.StatusConflict)

	waitStatus := func(id string, within time.Duration) (reservations.Reservation, time.Time) {
		t.Helper()
		for deadline := time.Now().Add(within); ; {
			r := call("GET", "/reservations/"+id, "", http.StatusOK)
			if r.Status == reservations.StatusExpired {
				return r, time.Now()
			}
			if time.Now().After(deadline) {
				t.Fatalf("reservation %s still %s %v after its expiry", id, r.Status, within)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	r, seen := waitStatus(left.ID, 20*time.Second)
	if seen.Before(r.ExpiresAt) {
		t.Fatalf("reservation expired at %v, before its deadline %v", seen, r.ExpiresAt)
	}
	// Well past the first deadline of the extended one, it holds.
	time.Sleep(time.Until(first.ExpiresAt.Add(time.Second)))
	if got := call("GET", "/reservations/"+extended.ID, "", http.StatusOK); got.Status != reservations.StatusHeld || time.Now().After(extended.ExpiresAt) {
		t.Fatalf("extended reservation is %s at %v (expires %v), want held", got.Status, time.Now(), extended.ExpiresAt)
	}
	r, seen = waitStatus(extended.ID, 20*time.Second)
	if seen.Before(extended.ExpiresAt) || r.Version != 2 {
		t.Fatalf("extended reservation expired at %v at version %d; its deadline is %v at version 2", seen, r.Version, extended.ExpiresAt)
	}
	if got := call("GET", "/reservations/"+confirmed.ID, "", http.StatusOK); got.Status != reservations.StatusConfirmed {
		t.Fatalf("confirmed reservation is %s after its deadline", got.Status)
	}
}

// testWriter sends a log to t.
type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}
