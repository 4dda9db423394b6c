package config

import (
	"strings"
	"testing"
)

// Case 3 of the safety review: a leak_grace shorter than the period means an
// object is due the first time a pass sees it (a brand-new pod's cgroup,
// which kubelet makes before the pod dir, included). It is a config error,
// and the message says why.
func TestLeakGraceShorterThanThePeriodIsAnError(t *testing.T) {
	for _, text := range []string{
		"[housekeeping]\nperiod = \"30s\"\nleak_grace = \"0s\"\n",
		"[housekeeping]\nperiod = \"30s\"\nleak_grace = \"10s\"\n",
		"[housekeeping]\nleak_grace = \"29s\"\n",
	} {
		_, err := Parse([]byte(text), testSource)
		if err == nil {
			t.Fatalf("accepted %q", text)
		}
		problems := Problems(err)
		if len(problems) != 1 || problems[0].Key != "housekeeping.leak_grace" || problems[0].Line != strings.Count(text, "\n") ||
			!strings.Contains(problems[0].Msg, "housekeeping.period") || !strings.Contains(problems[0].Msg, "once --leak-grace") {
			t.Fatalf("%q: problems = %v, want one on housekeeping.leak_grace at its line naming the period and the once command", text, err)
		}
	}
	if _, err := Parse([]byte("[housekeeping]\nperiod = \"30s\"\nleak_grace = \"30s\"\n"), testSource); err != nil {
		t.Fatalf("leak_grace equal to the period: %v", err)
	}
}

// A config written for the old breaker still loads: orphans.max_per_pass = 0
// (stop no orphan) becomes a budget of 0 for every class, floor included,
// with notices that say so.
func TestAnOldMaxPerPassOfZeroStillLoads(t *testing.T) {
	c, err := Parse([]byte("[orphans]\naction = \"stop\"\nmax_per_pass = 0\n"), testSource)
	if err != nil {
		t.Fatalf("an old config no longer loads: %v", err)
	}
	if c.Budget.MaxPerPass != 0 || c.Budget.MinPerPass != 0 {
		t.Fatalf("budget = %+v, want max_per_pass 0 and min_per_pass 0", c.Budget)
	}
	if len(c.Notices) != 2 || !strings.Contains(c.Notices[0], ":3: orphans.max_per_pass is deprecated") ||
		!strings.Contains(c.Notices[1], "budget.min_per_pass is set to 0 too") || !strings.Contains(c.Notices[1], `orphans.action = "report"`) {
		t.Fatalf("notices = %q", c.Notices)
	}
	// Set explicitly, the floor is the text's to choose, and validated.
	if _, err := Parse([]byte("[orphans]\nmax_per_pass = 0\n[budget]\nmin_per_pass = 1\n"), testSource); err == nil {
		t.Fatal("min_per_pass 1 over an aliased max_per_pass 0 accepted")
	}
}

// A budget set to 0 is said where it is set: every budgeted step is then
// held and no class trips, so nothing else would say it above debug level.
func TestABudgetOfZeroIsSaidWhereItIsSet(t *testing.T) {
	for _, tc := range []struct{ text, want string }{
		{"[budget]\nmin_per_pass = 0\nmax_per_pass = 0\n", testSource + ":3: budget.max_per_pass = 0 disables every budgeted step"},
		{"[budget]\nmax_per_hour = 0\n", testSource + ":2: budget.max_per_hour = 0 disables every budgeted step"},
		{"[budget]\nmax_per_hour = 1\n", ""},
		{"[budget]\nmin_per_pass = 0\nmax_fraction = 0.0\n", testSource + ":3: budget.max_fraction = 0 with budget.min_per_pass = 0 disables every budgeted step"},
		{"[budget]\nmax_fraction = 0.0\n", ""}, // the floor (min_per_pass, 1) is a pass's budget
	} {
		c, err := Parse([]byte(tc.text), testSource)
		if err != nil {
			t.Fatal(err)
		}
		got := strings.Join(c.Notices, "\n")
		if (tc.want == "") != (got == "") || !strings.HasPrefix(got, tc.want) {
			t.Errorf("%q: notices %q, want one starting %q", tc.text, c.Notices, tc.want)
		}
	}
}
