package poduid

import "testing"

func TestValidAcceptsOnlyWhatKubeletProduces(t *testing.T) {
	for _, tc := range []struct {
		uid  string
		want bool
	}{
		{"7b88465b-12fb-4fef-863c-3de5d3fab50d", true},
		{"0123456789abcdef0123456789abcdef", true}, // static pod md5
		{"7B88465B-12FB-4FEF-863C-3DE5D3FAB50D", false},
		{"7b88465b_12fb_4fef_863c_3de5d3fab50d", false},
		{"7b88465b-12fb-4fef-863c-3de5d3fab50", false},
		{"7b88465b-12fb-4fef-863c-3de5d3fab50dd", false},
		{"7b88465b12fb-4fef-863c-3de5d3fab50d-", false},
		{"0123456789abcdef0123456789abcdeg", false},
		{"../../etc/passwd-aaaa-bbbb-cccc-dddd", false},
		{"", false},
	} {
		if got := Valid(tc.uid); got != tc.want {
			t.Errorf("Valid(%q) = %v, want %v", tc.uid, got, tc.want)
		}
	}
}

func FuzzValidAgreesWithTheGrammar(f *testing.F) {
	f.Add("7b88465b-12fb-4fef-863c-3de5d3fab50d")
	f.Fuzz(func(t *testing.T, s string) {
		if !Valid(s) {
			return
		}
		for i := 0; i < len(s); i++ {
			c := s[i]
			if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c == '-') {
				t.Fatalf("Valid(%q) accepted byte %q", s, c)
			}
		}
	})
}
