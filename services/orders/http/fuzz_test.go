package http_test

import (
	"encoding/json"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/ordertimeout/ordertimeout/services/orders"
)

// The fuzz targets of the REST decoders (issue 7, scripts/fuzz.sh): whatever
// the body, path or query, the handler never panics and never answers 5xx;
// an error is an application/problem+json, a 400 names a field; an accepted
// order holds only strings Postgres can store (valid UTF-8, no NUL).

// checkFuzzAnswer fails t when an answer breaks the contract above.
func checkFuzzAnswer(t *testing.T, code int, ctype string, body []byte) {
	t.Helper()
	if code >= 500 {
		t.Fatalf("status %d: %s", code, body)
	}
	if code < 400 {
		return
	}
	if !strings.HasPrefix(ctype, "application/problem+json") {
		t.Fatalf("status %d with Content-Type %q", code, ctype)
	}
	var p problemBody
	if err := json.Unmarshal(body, &p); err != nil || p.Title == "" {
		t.Fatalf("status %d, problem %s: %v", code, body, err)
	}
	// A 400 names the fields. (The unknown member "" is named "": the
	// field is empty because the member's name is.)
	if code == http.StatusBadRequest && len(p.Errors) == 0 {
		t.Fatalf("400 without errors: %s", body)
	}
}

// storable reports whether Postgres text can hold s.
func storable(s string) bool { return utf8.ValidString(s) && !strings.ContainsRune(s, 0) }

func FuzzCreateOrder(f *testing.F) {
	for _, s := range []string{
		createBody,
		`{"customer_id":"c","currency":"USD","items":[{"sku":"s","quantity":1,"unit_price_minor":0}],"pay_by":"2026-11-23T12:00:00+01:00"}`,
		`{"customer_id":"c'); DROP TABLE orders; --","currency":"EUR","items":[{"sku":"A","quantity":1,"unit_price_minor":1}],"pay_within":"1h"}`,
		`{"customer_id":"c","currency":"EUR","items":[{"sku":"A","quantity":1000000,"unit_price_minor":9223372036854775807}],"pay_within":"1h"}`,
		`{"customer_id":"c","currency":"EUR","items":[{"sku":"A","quantity":1,"unit_price_minor":1}],"pay_within":"-5m"}`,
		`{"customer_id":"c","currency":"EUR","items":[{"sku":"A","quantity":1,"unit_price_minor":1}],"pay_by":"9999-12-31T23:59:59Z"}`,
		`{"customer_id":"клиент-😀","currency":"EUR","items":[{"sku":"A","quantity":1,"unit_price_minor":1}],"pay_within":"99999999999999999999h"}`,
		`{"customer_id":`, `[]`, `null`, `{}`, ``,
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, body string) {
		e := newEnv(t, nil)
		rec := e.do(t, "POST", "/v1/orders", body, true)
		checkFuzzAnswer(t, rec.Code, rec.Header().Get("Content-Type"), rec.Body.Bytes())
		if rec.Code != http.StatusCreated {
			return
		}
		o := decode[orders.Order](t, rec)
		texts := []string{o.CustomerID, o.Currency}
		for _, it := range o.Items {
			texts = append(texts, it.SKU)
		}
		for _, s := range texts {
			if !storable(s) {
				t.Fatalf("accepted an order with %q, which Postgres text cannot store", s)
			}
		}
	})
}

func FuzzOrderRequests(f *testing.F) {
	for _, s := range []struct{ path, query, body string }{
		{"", "status=paid&limit=10", ""},
		{"", "customer_id=' OR '1'='1&cursor=abc", ""},
		{"", "limit=-1", ""},
		{"{id}", "", ""},
		{"{id}/extend", "", `{"pay_within":"1h"}`},
		{"{id}/extend", "", `{"pay_by":"9999-12-31T23:59:59Z"}`},
		{"{id}/pay", "", ""},
		{"{id}/cancel", "", ""},
		{"x'; DROP TABLE orders; --/pay", "", ""},
		{"%00/extend", "", `{"pay_within":true}`},
	} {
		f.Add(s.path, s.query, s.body)
	}
	f.Fuzz(func(t *testing.T, path, query, body string) {
		e := newEnv(t, nil)
		o := e.create(t)
		path = strings.ReplaceAll(path, "{id}", o.ID)
		method := "GET"
		if strings.HasSuffix(path, "/pay") || strings.HasSuffix(path, "/cancel") || strings.HasSuffix(path, "/extend") {
			method = "POST"
		}
		target := "/v1/orders"
		if path != "" {
			target += "/" + path
		}
		u, err := url.Parse(target + "?" + query)
		if err != nil || u.Host != "" || u.Scheme != "" {
			return // not a request line a client can send
		}
		if strings.ContainsAny(target+query, " \t\r\n\x00#") || !utf8.ValidString(target+query) {
			return
		}
		rec := e.do(t, method, target+"?"+query, body, true)
		checkFuzzAnswer(t, rec.Code, rec.Header().Get("Content-Type"), rec.Body.Bytes())
	})
}
