package media

import (
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
)

// DefaultRule is the rule a run uses unless told: Qwen2-VL's and Qwen2.5-VL's, the open
// vision-language models served most often by vLLM and SGLang.
const DefaultRule = "qwen2-vl"

// Rule counts the prompt tokens of one image under a model family's processor. The zero
// Rule counts 0 for every image.
type Rule struct {
	name   string
	tokens func(width, height int) int
	fixed  bool
}

// Name returns the rule's name, as LookupRule takes it.
func (r Rule) Name() string { return r.name }

// Tokens returns the prompt tokens one image of width x height pixels counts for: the
// placeholder tokens the processor expands it to and the marker tokens around them that
// the processor or the chat template adds per image. A size-dependent rule counts 0 for
// an image whose size is unknown (width or height below 1); see Fixed.
func (r Rule) Tokens(width, height int) int {
	if r.tokens == nil {
		return 0
	}
	if !r.fixed && (width < 1 || height < 1) {
		return 0
	}
	return r.tokens(width, height)
}

// Fixed reports whether the rule counts the same tokens whatever the image's size, so
// that an image of unknown size (a trace that gives counts only) still counts right.
func (r Rule) Fixed() bool { return r.fixed }

// rules are the named rules; "fixed:N" is parsed by LookupRule.
var rules = map[string]Rule{
	"qwen2-vl":  {name: "qwen2-vl", tokens: QwenVLTokens},
	"llava-1.5": {name: "llava-1.5", tokens: func(int, int) int { return LLaVA15Tokens }, fixed: true},
	"gemma3":    {name: "gemma3", tokens: func(int, int) int { return Gemma3Tokens }, fixed: true},
	"anthropic": {name: "anthropic", tokens: AnthropicTokens},
	"openai":    {name: "openai", tokens: OpenAIHighTokens},
}

// RuleNames lists the names LookupRule takes, sorted, with "fixed:N" last.
func RuleNames() []string {
	names := make([]string, 0, len(rules)+1)
	for n := range rules {
		names = append(names, n)
	}
	sort.Strings(names)
	return append(names, "fixed:N")
}

// maxFixedTokens bounds fixed:N: no processor gives one image a million tokens, and a
// typo of extra digits should not pass.
const maxFixedTokens = 1 << 20

// LookupRule returns the rule named name: one of RuleNames, or "fixed:N" (every image
// counts N tokens, 0 <= N <= 1048576).
func LookupRule(name string) (Rule, error) {
	if r, ok := rules[name]; ok {
		return r, nil
	}
	if s, ok := strings.CutPrefix(name, "fixed:"); ok {
		n, err := strconv.Atoi(s)
		if err != nil || n < 0 || n > maxFixedTokens {
			return Rule{}, fmt.Errorf("image rule %q: N of fixed:N must be an integer in [0, %d]", name, maxFixedTokens)
		}
		return Rule{name: "fixed:" + strconv.Itoa(n), tokens: func(int, int) int { return n }, fixed: true}, nil
	}
	return Rule{}, fmt.Errorf("unknown image rule %q (want one of %s)", name, strings.Join(RuleNames(), ", "))
}

// The Qwen2-VL processor's settings, as the published checkpoints configure it
// (preprocessor_config.json of Qwen/Qwen2-VL-7B-Instruct and Qwen/Qwen2.5-VL-7B-Instruct:
// min_pixels 3136, max_pixels 12845056, patch_size 14, merge_size 2). The processor
// class's own defaults (transformers, Qwen2VLImageProcessor: max_pixels 28*28*1280) apply
// only when a checkpoint says nothing, which these do not.
const (
	QwenFactor    = 28       // patch_size 14 x merge_size 2: one LLM token per 28x28 pixels
	QwenMinPixels = 3136     // 56*56
	QwenMaxPixels = 12845056 // 28*28*16384
	// QwenMarkers are <|vision_start|> and <|vision_end|>, which Qwen2-VL's chat template
	// puts around each image's <|image_pad|> (the processor expands only the pad).
	QwenMarkers = 2
)

// QwenSmartResize returns the size Qwen2-VL's processor resizes an image of width x
// height to, following smart_resize in transformers
// (src/transformers/models/qwen2_vl/image_processing_qwen2_vl.py), which vLLM's model
// file (vllm/model_executor/models/qwen2_vl.py) calls for its token counts: each side
// rounded to the nearest multiple of factor (Python's round, half to even); if the area
// is then over maxPixels, both sides scaled by 1/beta, beta = sqrt(h*w/maxPixels), and
// floored to multiples of factor (at least factor); if under minPixels, scaled by
// beta = sqrt(minPixels/(h*w)) and ceiled. The floating-point operations are Python's,
// in its order, so the edges land where the processor's do. The processor refuses an
// aspect ratio over 200; the size is computed regardless.
func QwenSmartResize(width, height, factor, minPixels, maxPixels int) (w, h int) {
	f := float64(factor)
	hb := int(math.RoundToEven(float64(height)/f)) * factor
	wb := int(math.RoundToEven(float64(width)/f)) * factor
	switch {
	case hb*wb > maxPixels:
		beta := math.Sqrt(float64(height*width) / float64(maxPixels))
		hb = max(factor, int(math.Floor(float64(height)/beta/f))*factor)
		wb = max(factor, int(math.Floor(float64(width)/beta/f))*factor)
	case hb*wb < minPixels:
		beta := math.Sqrt(float64(minPixels) / float64(height*width))
		hb = int(math.Ceil(float64(height)*beta/f)) * factor
		wb = int(math.Ceil(float64(width)*beta/f)) * factor
	}
	return wb, hb
}

// QwenVLTokens is the qwen2-vl rule: the resized image (QwenSmartResize with the
// checkpoints' settings) is cut into 14x14 patches whose 2x2 groups merge into one token
// each, so (w/28)*(h/28) <|image_pad|> tokens, plus QwenMarkers. A 1024x1024 image is
// resized to 1036x1036: 37*37+2 = 1371 tokens.
func QwenVLTokens(width, height int) int {
	w, h := QwenSmartResize(width, height, QwenFactor, QwenMinPixels, QwenMaxPixels)
	return (w/QwenFactor)*(h/QwenFactor) + QwenMarkers
}

// LLaVA15Tokens is the llava-1.5 rule: the image is resized to CLIP ViT-L/14's 336x336,
// 24x24 = 576 patches, and the <image> placeholder becomes 576 tokens (transformers,
// src/transformers/models/llava/processing_llava.py: (336/14)^2 plus the CLS token, less
// it under vision_feature_select_strategy "default", as llava-1.5-7b-hf is configured),
// whatever the image's size. The chat template adds nothing around it.
const LLaVA15Tokens = 576

// Gemma3Tokens is the gemma3 rule: SigLIP at 896x896 pooled to mm_tokens_per_image = 256
// soft tokens, whatever the image's size (pan-and-scan off, the processor's default).
// transformers' Gemma3Processor (src/transformers/models/gemma3/processing_gemma3.py)
// replaces the <start_of_image> the chat template writes per image with
// "\n\n<start_of_image>" + 256 x <image_soft_token> + "<end_of_image>\n\n": Gemma's
// tokenizer has "\n\n" as one token, so the image is 1 + 1 + 256 + 1 + 1 = 260 tokens.
const Gemma3Tokens = 260

// Anthropic's documented image limits (docs.anthropic.com, "Vision", "Evaluate image
// size" and "Calculate image costs"): an image whose long edge is over 1568 pixels, or
// that would be over ~1600 tokens, is first scaled down, aspect ratio kept, to within
// both; then it costs width*height/750 tokens.
const (
	AnthropicMaxEdge      = 1568
	AnthropicMaxTokens    = 1600
	AnthropicPixelsPerTok = 750
)

// AnthropicTokens is the anthropic rule: an image whose long edge is over
// AnthropicMaxEdge scaled to that edge (sides floored), then one whose area is still over
// AnthropicMaxTokens*750 pixels scaled by sqrt(limit/area) (sides floored), then
// ceil(w*h/750). The documentation says "approximately": its table of costs (200x200
// ~54, 1000x1000 ~1334, 1092x1092 ~1590) is the ceiling, which this follows; its table
// of the largest sizes not resized runs a little over 1600 tokens (784x1568 is 1639),
// while its text says ~1600, which this follows.
func AnthropicTokens(width, height int) int {
	w, h := width, height
	if long := max(w, h); long > AnthropicMaxEdge {
		w, h = max(1, w*AnthropicMaxEdge/long), max(1, h*AnthropicMaxEdge/long)
	}
	const limit = AnthropicMaxTokens * AnthropicPixelsPerTok
	if w*h > limit {
		s := math.Sqrt(float64(limit) / float64(w*h))
		w, h = max(1, int(float64(w)*s)), max(1, int(float64(h)*s))
	}
	return (w*h + AnthropicPixelsPerTok - 1) / AnthropicPixelsPerTok
}

// OpenAI's documented tile rule for detail "high" (platform.openai.com/docs/guides/
// images-vision, "Calculating costs", GPT-4o and GPT-4.1's 512px-tile models).
const (
	OpenAIBox       = 2048 // first fit within 2048x2048
	OpenAIShortSide = 768  // then the short side scaled down to 768
	OpenAITile      = 512
	OpenAIBase      = 85  // tokens every image costs
	OpenAIPerTile   = 170 // tokens per 512x512 tile
)

// OpenAIHighTokens is the openai rule: the image scaled to fit within 2048x2048, then
// down so that its short side is at most 768 (the guide's examples only scale down; an
// image already smaller keeps its size), sides floored; then 85 + 170 per 512x512 tile
// covering it. 1024x1024 -> 768x768 -> 4 tiles -> 765; 2048x4096 -> 1024x2048 ->
// 768x1536 -> 6 tiles -> 1105, as the guide works them.
func OpenAIHighTokens(width, height int) int {
	w, h := width, height
	if long := max(w, h); long > OpenAIBox {
		w, h = max(1, w*OpenAIBox/long), max(1, h*OpenAIBox/long)
	}
	if short := min(w, h); short > OpenAIShortSide {
		w, h = w*OpenAIShortSide/short, h*OpenAIShortSide/short
	}
	tw := (w + OpenAITile - 1) / OpenAITile
	th := (h + OpenAITile - 1) / OpenAITile
	return OpenAIBase + OpenAIPerTile*tw*th
}
