#!/usr/bin/env node
// Reference token ids from an independent tokenizer implementation: @lenml/tokenizers (a
// dependency-free fork of transformers.js' tokenizers), installed by `scripts/setup.sh sanitize`
// into data/vocab/tokenizers-js. The tokenizer tests run it and compare stretch's ids with its.
//
//   node scripts/vocab_reference.js VOCAB_DIR [--cases] FILE...
//
// VOCAB_DIR holds tokenizer.json and tokenizer_config.json. Each FILE is encoded whole without
// special tokens (add_special_tokens false, as stretch's Encode); with --cases each FILE is cut
// at llama.cpp's test separator ("\n__ggml_vocab_test__\n", its .inp files) and every case is
// encoded alone. Output: one line per text, the ids separated by spaces.
"use strict";
const fs = require("fs");
const path = require("path");

const args = process.argv.slice(2);
if (args.length < 2) {
  process.stderr.write("usage: node scripts/vocab_reference.js VOCAB_DIR [--cases] FILE...\n");
  process.exit(2);
}
const dir = args.shift();
let cases = false;
if (args[0] === "--cases") {
  cases = true;
  args.shift();
}
const lib = require(path.join(__dirname, "..", "data", "vocab", "tokenizers-js", "dist", "main.js"));
const tokenizer = lib.TokenizerLoader.fromPreTrained({
  tokenizerJSON: JSON.parse(fs.readFileSync(path.join(dir, "tokenizer.json"), "utf8")),
  tokenizerConfig: JSON.parse(fs.readFileSync(path.join(dir, "tokenizer_config.json"), "utf8")),
});
const out = [];
for (const file of args) {
  const text = fs.readFileSync(file, "utf8");
  const texts = cases ? text.split("\n__ggml_vocab_test__\n") : [text];
  if (cases && texts.length > 1 && texts[texts.length - 1] === "") texts.pop();  // a closing separator
  for (const t of texts) out.push(tokenizer.encode(t, { add_special_tokens: false }).join(" "));
}
process.stdout.write(out.join("\n") + "\n");
