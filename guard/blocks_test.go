package guard

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

var blockNow = time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)

func readBlock(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", "blocks", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestParseBlockRequestGood(t *testing.T) {
	exp := func(s string) *time.Time {
		tm, err := time.Parse(time.RFC3339, s)
		if err != nil {
			t.Fatal(err)
		}
		return &tm
	}
	cases := []struct {
		file string
		want BlockRequest
	}{
		{"full.good.json", BlockRequest{User: "u-17", Group: "warehouse", Reason: "asked for payroll data", Expires: exp("2030-01-02T03:04:05Z")}},
		{"everywhere.good.json", BlockRequest{User: "u-17", Group: AllGroups}},
		{"nulls.good.json", BlockRequest{User: "u-17", Group: "g"}},
		{"offset.good.json", BlockRequest{User: "u-17", Group: "g", Expires: exp("2030-01-02T03:04:05.5Z")}},
	}
	for _, c := range cases {
		t.Run(c.file, func(t *testing.T) {
			got, err := ParseBlockRequest(readBlock(t, c.file), blockNow)
			if err != nil {
				t.Fatal(err)
			}
			if got.User != c.want.User || got.Group != c.want.Group || got.Reason != c.want.Reason {
				t.Errorf("got %+v, want %+v", got, c.want)
			}
			switch {
			case (got.Expires == nil) != (c.want.Expires == nil):
				t.Errorf("expires = %v, want %v", got.Expires, c.want.Expires)
			case got.Expires != nil && !got.Expires.Equal(*c.want.Expires):
				t.Errorf("expires = %v, want %v", got.Expires, c.want.Expires)
			}
		})
	}
}

func TestParseBlockRequestBad(t *testing.T) {
	cases := []struct {
		file, field, msg string
	}{
		{"no_user.bad.json", "user", "user: is required"},
		{"blank_user.bad.json", "user", "user: is required"},
		{"user_number.bad.json", "user", "user: must be a string"},
		{"no_group.bad.json", "group", "group: is required"},
		{"null_group.bad.json", "group", "group: is required"},
		{"reason_array.bad.json", "reason", "reason: must be a string"},
		{"expires_format.bad.json", "expires", `expires: must be an RFC 3339 time like "2026-12-01T00:00:00Z"`},
		{"expires_past.bad.json", "expires", "expires: must be in the future"},
		{"expires_number.bad.json", "expires", "expires: must be a string"},
		{"unknown_field.bad.json", "task", "task: unknown field"},
		{"array.bad.json", "", "body must be a JSON object"},
		{"trailing.bad.json", "", "body must be a JSON object"},
		{"null.bad.json", "", "body must be a JSON object"},
		{"empty.bad.json", "", "body must be a JSON object"},
	}
	for _, c := range cases {
		t.Run(c.file, func(t *testing.T) {
			_, err := ParseBlockRequest(readBlock(t, c.file), blockNow)
			if err == nil {
				t.Fatal("no error")
			}
			var fe *FieldError
			if !errors.As(err, &fe) {
				t.Fatalf("error %v is not a *FieldError", err)
			}
			if fe.Field != c.field {
				t.Errorf("field = %q, want %q", fe.Field, c.field)
			}
			if !strings.HasPrefix(err.Error(), c.msg) {
				t.Errorf("message = %q, want it to begin %q", err.Error(), c.msg)
			}
		})
	}
}

func TestParseBlockRequestExpiresNow(t *testing.T) {
	body := []byte(`{"user":"u","group":"g","expires":"2026-11-30T12:00:00Z"}`)
	if _, err := ParseBlockRequest(body, blockNow); err == nil {
		t.Error("an expiry equal to now was accepted")
	}
	if _, err := ParseBlockRequest(body, blockNow.Add(-time.Second)); err != nil {
		t.Errorf("an expiry one second ahead was refused: %v", err)
	}
}

func TestBlockMessage(t *testing.T) {
	cases := []struct {
		reason  string
		private bool
		want    string
	}{
		{"asked for payroll data", false, "you are blocked from this task: asked for payroll data"},
		{"asked for payroll data", true, "you are blocked from this task"},
		{"", false, "you are blocked from this task"},
		{"  ", false, "you are blocked from this task"},
	}
	for _, c := range cases {
		if got := BlockMessage(c.reason, c.private); got != c.want {
			t.Errorf("BlockMessage(%q, %v) = %q, want %q", c.reason, c.private, got, c.want)
		}
	}
}
