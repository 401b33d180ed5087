package envconfig_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/ordertimeout/ordertimeout/internal/envconfig"
)

type inner struct {
	Wait  time.Duration `env:"WAIT"`
	Count int           `env:"COUNT"`
}

type config struct {
	Name   string          `env:"APP_NAME"`
	List   []string        `env:"APP_LIST" envSeparator:","`
	Size   envconfig.Bytes `env:"APP_SIZE"`
	Period time.Duration   `env:"APP_PERIOD"`
	Inner  inner           `envPrefix:"APP_"`
	Other  int
}

func TestParse(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		env     map[string]string
		want    config
		wantErr string // the variables the error names, space-separated
	}{
		{name: "unset keeps the defaults", env: nil, want: config{Name: "default", Period: time.Second, Other: 7}},
		{name: "values, trimmed", env: map[string]string{"APP_NAME": " x ", "APP_LIST": "a, b ,c", "APP_SIZE": "2KiB", "APP_PERIOD": " 250ms",
			"APP_WAIT": "2m", "APP_COUNT": "3", "OTHER": "9"},
			want: config{Name: "x", List: []string{"a", "b", "c"}, Size: 2048, Period: 250 * time.Millisecond, Inner: inner{Wait: 2 * time.Minute, Count: 3}, Other: 7}},
		{name: "off", env: map[string]string{"APP_SIZE": "off"}, want: config{Name: "default", Size: -1, Period: time.Second, Other: 7}},
		{name: "negative duration", env: map[string]string{"APP_PERIOD": "-1s"}, wantErr: "APP_PERIOD"},
		{name: "nested, named with its prefix", env: map[string]string{"APP_WAIT": "soon"}, wantErr: "APP_WAIT"},
		{name: "negative integer", env: map[string]string{"APP_COUNT": "-2"}, wantErr: "APP_COUNT"},
		{name: "every error", env: map[string]string{"APP_COUNT": "x", "APP_SIZE": "big", "APP_PERIOD": "10"}, wantErr: "APP_COUNT APP_SIZE APP_PERIOD"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c := config{Name: "default", Period: time.Second, Other: 7}
			err := envconfig.Parse(&c, tt.env)
			if tt.wantErr != "" {
				for _, v := range strings.Fields(tt.wantErr) {
					if err == nil || !strings.Contains(err.Error(), v+":") {
						t.Fatalf("err = %v, want one naming %s", err, v)
					}
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if c.Name != tt.want.Name || strings.Join(c.List, "|") != strings.Join(tt.want.List, "|") || c.Size != tt.want.Size ||
				c.Period != tt.want.Period || c.Inner != tt.want.Inner || c.Other != tt.want.Other {
				t.Fatalf("config = %+v, want %+v", c, tt.want)
			}
		})
	}
}

func ExampleParse() {
	type Config struct {
		Addr    string        `env:"SHOP_ADDR"`
		Timeout time.Duration `env:"SHOP_TIMEOUT"`
	}
	c := Config{Addr: ":8080", Timeout: 5 * time.Second} // the defaults
	err := envconfig.Parse(&c, map[string]string{"SHOP_TIMEOUT": "2s"})
	fmt.Println(c.Addr, c.Timeout, err)
	err = envconfig.Parse(&c, map[string]string{"SHOP_TIMEOUT": "-2s"})
	fmt.Println(err)
	// Output:
	// :8080 2s <nil>
	// SHOP_TIMEOUT: "-2s" is not a duration such as 250ms or 2m
}
