package daemon_test

import (
	"strings"
	"testing"
	"time"

	"github.com/ordertimeout/ordertimeout/internal/testcerts"
	"github.com/ordertimeout/ordertimeout/internal/tlsclient"
	"github.com/ordertimeout/ordertimeout/services/orders/daemon"
)

func TestFromEnv(t *testing.T) {
	t.Parallel()
	base := map[string]string{"ORDERS_DATABASE_URL": "postgres://x", "ORDERS_NATS_URL": "nats://x", "ORDERS_API_TOKENS": " a , b ,"}
	certs, err := testcerts.Write(t.TempDir(), "nats")
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		set     map[string]string
		wantErr string // the variables the error names, space-separated; "" = valid
		check   func(t *testing.T, c daemon.Config)
	}{
		{name: "defaults", check: func(t *testing.T, c daemon.Config) {
			if c.HTTPAddr != ":8081" || c.Limits.PayWithinMin != time.Second || c.Limits.PayWithinMax != 24*time.Hour ||
				len(c.APITokens) != 2 || c.APITokens[0] != "a" || c.APITokens[1] != "b" || c.MaxOutboxLag != 10*time.Second ||
				c.StatementTimeout != 30*time.Second || c.IdleInTransactionTimeout != time.Minute ||
				c.PaymentGrace != 0 || c.ReconcileMargin != 30*time.Second || c.ReconcileInterval != 10*time.Second || c.SingleCommands || c.CancelAckWait != 2*time.Second ||
				c.NATSTLS.Enabled() {
				t.Fatalf("config = %+v", c)
			}
		}},
		{name: "nats tls", set: map[string]string{"ORDERS_NATS_CA_FILE": certs.CA, "ORDERS_NATS_CERT_FILE": certs.ClientCert, "ORDERS_NATS_KEY_FILE": certs.ClientKey},
			check: func(t *testing.T, c daemon.Config) {
				if c.NATSTLS != (tlsclient.Files{CAFile: certs.CA, CertFile: certs.ClientCert, KeyFile: certs.ClientKey}) {
					t.Fatalf("NATSTLS = %+v", c.NATSTLS)
				}
			}},
		{name: "nats CA missing", set: map[string]string{"ORDERS_NATS_CA_FILE": certs.CA + ".missing"}, wantErr: "ORDERS_NATS_CA_FILE"},
		{name: "nats cert without key", set: map[string]string{"ORDERS_NATS_CA_FILE": certs.CA, "ORDERS_NATS_CERT_FILE": certs.ClientCert},
			wantErr: "ORDERS_NATS_CERT_FILE ORDERS_NATS_KEY_FILE"},
		{name: "overrides", set: map[string]string{"ORDERS_HTTP_ADDR": ":9", "ORDERS_PAY_WITHIN_MIN": "5s", "ORDERS_PAY_WITHIN_MAX": "1h", "ORDERS_LOG_LEVEL": "debug",
			"ORDERS_MAX_OUTBOX_LAG": "2500ms", "ORDERS_STATEMENT_TIMEOUT": "5s", "ORDERS_IDLE_IN_TRANSACTION_TIMEOUT": "2m",
			"ORDERS_PAYMENT_GRACE": "2s", "ORDERS_RECONCILE_MARGIN": "1m", "ORDERS_RECONCILE_INTERVAL": "3s", "ORDERS_SINGLE_COMMANDS": "true",
			"ORDERS_CANCEL_ACK_WAIT": "5s"},
			check: func(t *testing.T, c daemon.Config) {
				if c.HTTPAddr != ":9" || c.Limits.PayWithinMin != 5*time.Second || c.Limits.PayWithinMax != time.Hour || c.LogLevel.String() != "DEBUG" ||
					c.MaxOutboxLag != 2500*time.Millisecond || c.StatementTimeout != 5*time.Second || c.IdleInTransactionTimeout != 2*time.Minute ||
					c.PaymentGrace != 2*time.Second || c.ReconcileMargin != time.Minute || c.ReconcileInterval != 3*time.Second || !c.SingleCommands ||
					c.CancelAckWait != 5*time.Second {
					t.Fatalf("config = %+v", c)
				}
			}},
		{name: "ack wait below a second", set: map[string]string{"ORDERS_CANCEL_ACK_WAIT": "500ms"}, wantErr: "ORDERS_CANCEL_ACK_WAIT"},
		{name: "no database", set: map[string]string{"ORDERS_DATABASE_URL": ""}, wantErr: "ORDERS_DATABASE_URL"},
		{name: "no nats", set: map[string]string{"ORDERS_NATS_URL": ""}, wantErr: "ORDERS_NATS_URL"},
		{name: "no tokens", set: map[string]string{"ORDERS_API_TOKENS": " , "}, wantErr: "ORDERS_API_TOKENS"},
		{name: "bad min", set: map[string]string{"ORDERS_PAY_WITHIN_MIN": "soon"}, wantErr: "ORDERS_PAY_WITHIN_MIN"},
		{name: "zero min", set: map[string]string{"ORDERS_PAY_WITHIN_MIN": "0s"}, wantErr: "ORDERS_PAY_WITHIN_MIN"},
		{name: "max below min", set: map[string]string{"ORDERS_PAY_WITHIN_MAX": "500ms"}, wantErr: "ORDERS_PAY_WITHIN_MAX"},
		{name: "bad outbox lag", set: map[string]string{"ORDERS_MAX_OUTBOX_LAG": "10"}, wantErr: "ORDERS_MAX_OUTBOX_LAG"},
		{name: "zero outbox lag", set: map[string]string{"ORDERS_MAX_OUTBOX_LAG": "0s"}, wantErr: "ORDERS_MAX_OUTBOX_LAG"},
		{name: "bad statement timeout", set: map[string]string{"ORDERS_STATEMENT_TIMEOUT": "30"}, wantErr: "ORDERS_STATEMENT_TIMEOUT"},
		{name: "zero statement timeout", set: map[string]string{"ORDERS_STATEMENT_TIMEOUT": "0s"}, wantErr: "ORDERS_STATEMENT_TIMEOUT"},
		{name: "bad idle timeout", set: map[string]string{"ORDERS_IDLE_IN_TRANSACTION_TIMEOUT": "1 minute"}, wantErr: "ORDERS_IDLE_IN_TRANSACTION_TIMEOUT"},
		{name: "sub-millisecond idle timeout", set: map[string]string{"ORDERS_IDLE_IN_TRANSACTION_TIMEOUT": "10us"}, wantErr: "ORDERS_IDLE_IN_TRANSACTION_TIMEOUT"},
		{name: "negative grace", set: map[string]string{"ORDERS_PAYMENT_GRACE": "-1s"}, wantErr: "ORDERS_PAYMENT_GRACE"},
		{name: "zero reconcile margin", set: map[string]string{"ORDERS_RECONCILE_MARGIN": "0s"}, wantErr: "ORDERS_RECONCILE_MARGIN"},
		{name: "bad reconcile interval", set: map[string]string{"ORDERS_RECONCILE_INTERVAL": "10"}, wantErr: "ORDERS_RECONCILE_INTERVAL"},
		{name: "bad single commands", set: map[string]string{"ORDERS_SINGLE_COMMANDS": "sometimes"}, wantErr: "ORDERS_SINGLE_COMMANDS"},
		{name: "bad level", set: map[string]string{"ORDERS_LOG_LEVEL": "loud"}, wantErr: "ORDERS_LOG_LEVEL"},
		{name: "every error", set: map[string]string{"ORDERS_NATS_URL": "", "ORDERS_RECONCILE_INTERVAL": "soon", "ORDERS_PAY_WITHIN_MIN": "-1s", "ORDERS_MAX_OUTBOX_LAG": "0s"},
			wantErr: "ORDERS_NATS_URL ORDERS_RECONCILE_INTERVAL ORDERS_PAY_WITHIN_MIN ORDERS_MAX_OUTBOX_LAG"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			env := map[string]string{}
			for k, v := range base {
				env[k] = v
			}
			for k, v := range tt.set {
				env[k] = v
			}
			c, err := daemon.FromEnv(env)
			if tt.wantErr != "" {
				for _, v := range strings.Fields(tt.wantErr) {
					if err == nil || !strings.Contains(err.Error(), v) {
						t.Fatalf("err = %v, want one naming %s", err, v)
					}
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			tt.check(t, c)
		})
	}
}
