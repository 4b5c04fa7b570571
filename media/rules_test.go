package media

import (
	"strings"
	"testing"
)

// The expected counts below are worked by hand from each source's formula (the steps are
// in the comments), not taken from the code under test.

// ruleCase is one image size and the tokens a rule gives it, with the working.
type ruleCase struct {
	w, h, want int
	why        string
}

// checkRule checks f against every case.
func checkRule(t *testing.T, name string, f func(w, h int) int, cases []ruleCase) {
	t.Helper()
	for _, c := range cases {
		if got := f(c.w, c.h); got != c.want {
			t.Errorf("%s(%d, %d) = %d, want %d (%s)", name, c.w, c.h, got, c.want, c.why)
		}
	}
}

func TestQwenVLTokens(t *testing.T) {
	checkRule(t, "QwenVLTokens", QwenVLTokens, []ruleCase{
		{1024, 1024, 1371, "1024/28=36.57 rounds to 37: 1036x1036, 37*37+2"},
		{512, 512, 326, "512/28=18.29 rounds to 18: 504x504, 18*18+2"},
		{42, 42, 6, "42/28=1.5 rounds half to even, up to 2: 56x56 = min_pixels exactly, 2*2+2"},
		{70, 70, 6, "70/28=2.5 rounds half to even, down to 2: 56x56, 2*2+2 (half up would give 3*3+2)"},
		{98, 98, 18, "98/28=3.5 rounds half to even, up to 4: 112x112, 4*4+2"},
		{14, 14, 6, "14/28=0.5 rounds to 0: area 0 < 3136, beta=sqrt(3136/196)=4, ceil(14*4/28)=2: 56x56"},
		{100, 10, 9, "h rounds to 0: beta=sqrt(3136/1000)=1.7709, h ceil(0.63)=1, w ceil(6.32)=7: 196x28, 7*1+2"},
		{1920, 1080, 2693, "1920/28=68.57 -> 69, 1080/28=38.57 -> 39: 1932x1092, 69*39+2"},
		{4000, 3000, 15303, "143x107 multiples: 4004*2996 = 11,995,984 <= max_pixels, 143*107+2"},
		{3584, 3584, 16386, "128*28 square: area = max_pixels exactly, not over: 128*128+2"},
		{3612, 3612, 16386, "129*28 square: over max_pixels, beta=1.0078125 exactly, 3612/beta/28 = 128.0: floor 128"},
		{8000, 6000, 16172, "over: beta=sqrt(48e6/12845056)=1.93309, w floor(147.80)=147, h floor(110.85)=110: 147*110+2"},
		{5000, 100, 718, "5000/28=178.57 -> 179, 100/28=3.57 -> 4: 5012x112, 179*4+2"},
	})
}

func TestAnthropicTokens(t *testing.T) {
	checkRule(t, "AnthropicTokens", AnthropicTokens, []ruleCase{
		{200, 200, 54, "40,000/750 = 53.3, the docs' ~54"},
		{1000, 1000, 1334, "1,000,000/750 = 1333.3, the docs' ~1334"},
		{1092, 1092, 1590, "1,192,464/750 = 1589.95, the docs' ~1590"},
		{2000, 500, 820, "long edge to 1568: 1568x392 = 614,656 px, /750 = 819.5"},
		{784, 1568, 1599, "edge fits; 1,229,312 px over 1.2M: s=0.98801, 774x1549 = 1,198,926, /750 = 1598.6"},
		{4000, 3000, 1598, "edge: 1568x1176 = 1,843,968 px; s=sqrt(1.2M/1,843,968)=0.80670: 1264x948 = 1,198,272, /750 = 1597.7"},
		{1, 1, 1, "one pixel still costs a token (ceil)"},
	})
}

func TestOpenAIHighTokens(t *testing.T) {
	checkRule(t, "OpenAIHighTokens", OpenAIHighTokens, []ruleCase{
		{1024, 1024, 765, "the guide's: 768x768, 4 tiles, 85+4*170"},
		{2048, 4096, 1105, "the guide's: 1024x2048, then 768x1536, 6 tiles"},
		{4096, 8192, 1105, "box: 1024x2048, then 768x1536, 6 tiles"},
		{512, 512, 255, "no scaling, 1 tile"},
		{513, 513, 765, "no scaling, 2x2 tiles"},
		{1920, 1080, 1105, "short side 1080 -> 768: 1365x768, 3x2 tiles"},
		{100, 3000, 765, "box: 68x2048; short side under 768: 1x4 tiles, 85+4*170"},
	})
}

func TestLookupRule(t *testing.T) {
	for _, c := range []struct {
		name       string
		w, h, want int
	}{
		{"qwen2-vl", 1024, 1024, 1371},
		{"llava-1.5", 1024, 768, 576},
		{"llava-1.5", 0, 0, 576}, // size-free: an unknown size still counts
		{"gemma3", 300, 200, 260},
		{"anthropic", 1000, 1000, 1334},
		{"openai", 1024, 1024, 765},
		{"fixed:100", 5, 5, 100},
		{"fixed:0", 5, 5, 0},
		{"qwen2-vl", 0, 0, 0}, // size unknown: a size rule cannot say
	} {
		r, err := LookupRule(c.name)
		if err != nil {
			t.Fatalf("LookupRule(%q): %v", c.name, err)
		}
		if r.Name() != c.name {
			t.Errorf("LookupRule(%q).Name() = %q", c.name, r.Name())
		}
		if got := r.Tokens(c.w, c.h); got != c.want {
			t.Errorf("%s.Tokens(%d, %d) = %d, want %d", c.name, c.w, c.h, got, c.want)
		}
	}
	if r, _ := LookupRule(DefaultRule); r.Name() != "qwen2-vl" {
		t.Errorf("DefaultRule is %q", r.Name())
	}
	for _, bad := range []string{"", "qwen", "fixed:", "fixed:-1", "fixed:x", "fixed:2000000"} {
		_, err := LookupRule(bad)
		if err == nil {
			t.Errorf("LookupRule(%q) accepted", bad)
			continue
		}
		if !strings.Contains(err.Error(), "fixed") {
			t.Errorf("LookupRule(%q) error %q does not say what is taken", bad, err)
		}
	}
	_, err := LookupRule("nope")
	for _, n := range RuleNames() {
		if !strings.Contains(err.Error(), n) {
			t.Errorf("unknown-rule error %q does not list %s", err, n)
		}
	}
	if (Rule{}).Tokens(10, 10) != 0 {
		t.Error("the zero Rule counts tokens")
	}
}
