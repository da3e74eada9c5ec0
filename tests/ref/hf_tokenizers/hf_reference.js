// hf_reference.js: the real Hugging Face tokenizers library (the npm package
// `tokenizers`, the Rust library's Node binding) over texts, for
// test_hf_tokenizers.py.
//   node hf_reference.js TOKENIZER.json TEXTS.json OUT.json
// TEXTS.json: an array of strings. OUT.json: {"load_s": s, "results": [{"ids",
// "ids_plain", "decoded", "decoded_skip"} per text]}, the same shape as
// al_tokbatch writes: ids with and without the special tokens the
// post-processor adds, and the decoding of the first with and without the
// special tokens. Only tokenizer.json is read (Tokenizer.fromFile), as
// al_tokbatch reads it.
'use strict';
const fs = require('fs');
const { Tokenizer } = require('tokenizers');

async function main() {
  const [tokPath, textsPath, outPath] = process.argv.slice(2);
  const texts = JSON.parse(fs.readFileSync(textsPath, 'utf8'));
  const t0 = process.hrtime.bigint();
  const tok = Tokenizer.fromFile(tokPath);
  const loadS = Number(process.hrtime.bigint() - t0) / 1e9;
  const results = [];
  for (const text of texts) {
    const enc = await tok.encode(text, null, { addSpecialTokens: true });
    const plain = await tok.encode(text, null, { addSpecialTokens: false });
    const ids = Array.from(enc.getIds());
    results.push({
      ids,
      ids_plain: Array.from(plain.getIds()),
      decoded: await tok.decode(ids, false),
      decoded_skip: await tok.decode(ids, true),
    });
  }
  fs.writeFileSync(outPath, JSON.stringify({ load_s: loadS, results }));
}

main().catch((e) => {
  process.stderr.write(`hf_reference.js: ${e && e.stack ? e.stack : e}\n`);
  process.exit(1);
});
