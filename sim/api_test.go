package sim

import (
	"encoding/json"
	"slices"
	"testing"
)

// TestScanIDs: the fast path for token-id prompts takes plain integer lists, and leaves
// everything else to encoding/json (which words the errors).
func TestScanIDs(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want []int
		ok   bool
	}{
		{"[1,2,3]", []int{1, 2, 3}, true},
		{"[ 100256 ,\n\t0, -0 , 7 ]", []int{100256, 0, 0, 7}, true},
		{"[-5]", []int{-5}, true}, // scanned; checkIDs refuses it
		{"[]", nil, false},
		{"[1,]", nil, false},
		{"[1 2]", nil, false},
		{"[01]", nil, false},
		{"[1.0]", nil, false},
		{"[1e3]", nil, false},
		{"[\"a\"]", nil, false},
		{"[[1,2]]", nil, false},
		{"[1,2", nil, false},
		{"[1]x", nil, false},
		{"[-]", nil, false},
		{"[1234567890123456789]", nil, false}, // 19 digits: left to encoding/json
	} {
		got, ok := scanIDs([]byte(tc.in))
		if ok != tc.ok || (ok && !slices.Equal(got, tc.want)) {
			t.Errorf("scanIDs(%q) = %v, %v; want %v, %v", tc.in, got, ok, tc.want, tc.ok)
		}
	}
	if _, err := parsePrompt(json.RawMessage("[5, 100277]")); err == nil || err.(*apiError).msg != "prompt[1]: token id 100277 is out of vocabulary [0,100277)" {
		t.Errorf("out-of-vocabulary id: %v", err)
	}
}

// FuzzScanIDs: whatever scanIDs accepts, encoding/json reads as the same integers.
func FuzzScanIDs(f *testing.F) {
	for _, s := range []string{"[1,2,3]", "[ 0 ]", "[-0,5]", "[1.5]", "[1,,2]", "[9999999999]", "[1]\n"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if len(s) == 0 || s[0] != '[' {
			return
		}
		got, ok := scanIDs([]byte(s))
		if !ok {
			return
		}
		var want []int
		if err := json.Unmarshal([]byte(s), &want); err != nil || !slices.Equal(got, want) {
			t.Fatalf("scanIDs(%q) = %v, encoding/json: %v, %v", s, got, want, err)
		}
	})
}
