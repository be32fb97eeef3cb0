#!/usr/bin/env node
// ort-run.js - ONNX Runtime (CPU) reference runner of `stpar verify`.
//
// Part of stpar. Runs on Node.js with onnxruntime-node, which
// scripts/install-deps.sh installs into <root>/.deps/node/node_modules
// (found relative to this file; $STPAR_ORT_NODE_MODULES overrides).
//
// Files follow the IO contract of the emitted program (docs/emitted-code.md,
// docs/verify.md): io.json = {"inputs":[{"name","file","dtype","shape"}],
// "outputs":[...]} with global shapes and ONNX names; input_<i>.bin and
// output_<i>.bin are raw little-endian tensors (int64, float32, bool as
// uint8 ...).
//
//   ort-run.js run --model M.onnx --io io.json --inputs DIR --outputs DIR
//       Runs the unpartitioned model on DIR's input files, writes the
//       reference output files (checked against io.json's dtype and shape).
//   ort-run.js gen-inputs --model M.onnx --io io.json --seed K --outputs DIR
//       Writes random inputs by the rule of docs/verify.md.
//   ort-run.js from-pb --io io.json --pb DIR --outputs DIR [--partial=1]
//       Converts DIR/input_<i>.pb (ONNX TensorProto, backend-test layout) to
//       input_<i>.bin, checking dtype and shape. --partial=1: io.json inputs
//       without a .pb keep what --outputs holds (e.g. from gen-inputs); at
//       least one must be converted.
//   ort-run.js compare --io io.json --actual DIR --expected DIR
//                      [--rtol 1e-4] [--atol 1e-5]
//       Compares output_<i>.bin of DIR with the expected output_<i>.bin (or
//       output_<i>.pb); prints one line per output; exit 0 only if all pass.
//
// Exit codes: 0 success, 1 comparison failed, 2 usage or input error.

'use strict';

const fs = require('fs');
const path = require('path');

function fail(message) {
  process.stderr.write(`ort-run: error: ${message}\n`);
  process.exit(2);
}

function parseArgs(argv) {
  const args = {_: []};
  for (let i = 0; i < argv.length; ++i) {
    const a = argv[i];
    if (!a.startsWith('--')) { args._.push(a); continue; }
    const eq = a.indexOf('=');
    if (eq >= 0) { args[a.slice(2, eq)] = a.slice(eq + 1); continue; }
    if (i + 1 >= argv.length) fail(`option ${a} needs a value`);
    args[a.slice(2)] = argv[++i];
  }
  return args;
}

function need(args, name) {
  if (args[name] === undefined) fail(`missing --${name}`);
  return args[name];
}

//===----------------------------------------------------------------------===//
// dtypes
//===----------------------------------------------------------------------===//

// io.json dtype -> typed array, element size, ONNX TensorProto data_type.
const DTYPES = {
  float32 : {array : Float32Array, size : 4, onnx : 1},
  float64 : {array : Float64Array, size : 8, onnx : 11},
  int64 : {array : BigInt64Array, size : 8, onnx : 7},
  int32 : {array : Int32Array, size : 4, onnx : 6},
  int16 : {array : Int16Array, size : 2, onnx : 5},
  int8 : {array : Int8Array, size : 1, onnx : 3},
  uint8 : {array : Uint8Array, size : 1, onnx : 2},
  bool : {array : Uint8Array, size : 1, onnx : 9},
  // 16-bit floats are held as their bit patterns (see halfToNumber).
  float16 : {array : Uint16Array, size : 2, onnx : 10},
  bfloat16 : {array : Uint16Array, size : 2, onnx : 16},
  // Older ONNX test data stores bfloat16 values as uint16 bit patterns.
  uint16 : {array : Uint16Array, size : 2, onnx : 4},
};
// A test-data tensor of dtype `got` may hold values of io.json's `want`.
const sameDtype = (got, want) =>
    got === want || (got === 'uint16' && want === 'bfloat16');

// IEEE binary16 / bfloat16 bit patterns <-> numbers (round to nearest even).
const f32 = new Float32Array(1), u32 = new Uint32Array(f32.buffer);
function halfToNumber(dtype, bits) {
  if (dtype === 'bfloat16') {
    u32[0] = bits << 16;
    return f32[0];
  }
  const sign = bits & 0x8000 ? -1 : 1, exp = (bits >> 10) & 0x1f,
        mant = bits & 0x3ff;
  if (exp === 0x1f)
    return mant ? NaN : sign * Infinity;
  if (exp === 0)
    return sign * mant * 2 ** -24;
  return sign * (1 + mant / 1024) * 2 ** (exp - 15);
}
function roundHalfEven(v) {
  const f = Math.floor(v), d = v - f;
  return d > 0.5 || (d === 0.5 && f % 2 !== 0) ? f + 1 : f;
}
function numberToHalf(dtype, x) {
  f32[0] = x;
  const u = u32[0];
  if (dtype === 'bfloat16') {
    if ((u & 0x7fffffff) > 0x7f800000)
      return ((u >>> 16) | 0x40) & 0xffff;
    return (((u + 0x7fff + ((u >>> 16) & 1)) >>> 0) >>> 16) & 0xffff;
  }
  const sign = (u >>> 16) & 0x8000;
  const a = (u & 0x7fffffff) >>> 0;
  if (a > 0x7f800000)
    return sign | 0x7e00;
  if (a >= 0x477ff000)
    return sign | 0x7c00; // rounds to >= 65520
  if (a < 0x38800000) {   // subnormal: a multiple of 2^-24 (exact in a double)
    return sign | roundHalfEven(Math.abs(f32[0]) * 2 ** 24);
  }
  const odd = (a >>> 13) & 1;
  return (sign | (((a + 0xc8000fff + odd) >>> 0) >>> 13)) & 0xffff;
}
const isHalf = (dtype) => dtype === 'float16' || dtype === 'bfloat16';
// Smallest tolerances of 16-bit float outputs (compare): about 10 units in
// the last place (2^-11 for float16, 2^-8 for bfloat16), since both programs
// round every op's result to 16 bits but fuse and accumulate differently.
const HALF_TOL = {
  float16 : {rtol : 5e-3, atol : 5e-3},
  bfloat16 : {rtol : 4e-2, atol : 4e-2}
};
const ONNX_TO_DTYPE = {};
for (const [name, d] of Object.entries(DTYPES)) ONNX_TO_DTYPE[d.onnx] = name;

// ORT's type names differ for a few.
const ORT_TYPE = {
  float32 : 'float32',
  float64 : 'float64',
  int64 : 'int64',
  int32 : 'int32',
  int16 : 'int16',
  int8 : 'int8',
  uint8 : 'uint8',
  bool : 'bool',
  float16 : 'float16'
};

function dtypeInfo(dtype, where) {
  const d = DTYPES[dtype];
  if (!d) fail(`${where}: unsupported dtype '${dtype}' (supported: ${Object.keys(DTYPES).join(', ')})`);
  return d;
}

function numElements(shape) { return shape.reduce((a, b) => a * b, 1); }
function shapeStr(shape) { return `[${shape.join(',')}]`; }

// Reads a raw tensor file into a (freshly aligned) typed array.
function readBin(file, dtype, shape) {
  const d = dtypeInfo(dtype, file);
  if (!fs.existsSync(file)) fail(`missing file ${file}`);
  const buf = fs.readFileSync(file);
  const want = numElements(shape) * d.size;
  if (buf.length !== want)
    fail(`${file}: ${buf.length} bytes, expected ${want} (${dtype} ${shapeStr(shape)})`);
  const ab = new ArrayBuffer(want);
  new Uint8Array(ab).set(buf);
  return new d.array(ab);
}

function writeBin(file, typed) {
  fs.writeFileSync(file, Buffer.from(typed.buffer, typed.byteOffset, typed.byteLength));
}

function loadIO(file) {
  let io;
  try { io = JSON.parse(fs.readFileSync(file, 'utf8')); }
  catch (e) { fail(`cannot read ${file}: ${e.message}`); }
  for (const key of ['inputs', 'outputs']) {
    if (!Array.isArray(io[key])) fail(`${file}: no '${key}' array`);
    io[key].forEach((t, i) => {
      if (typeof t.name !== 'string' || typeof t.dtype !== 'string' || !Array.isArray(t.shape))
        fail(`${file}: ${key}[${i}] needs name, dtype and shape`);
      dtypeInfo(t.dtype, `${file}: ${key}[${i}]`);
      if (!t.file) t.file = `${key === 'inputs' ? 'input' : 'output'}_${i}.bin`;
    });
  }
  return io;
}

//===----------------------------------------------------------------------===//
// A minimal protobuf reader (TensorProto, ModelProto)
//===----------------------------------------------------------------------===//

// Yields [fieldNumber, wireType, value]: value is a BigInt (varint), a
// Buffer slice (length-delimited, fixed64, fixed32).
function* pbFields(buf) {
  let p = 0;
  const varint = () => {
    let r = 0n, s = 0n;
    for (;;) {
      if (p >= buf.length) throw new Error('truncated protobuf');
      const c = buf[p++];
      r |= BigInt(c & 0x7f) << s;
      if (!(c & 0x80)) return r;
      s += 7n;
    }
  };
  while (p < buf.length) {
    const key = Number(varint());
    const field = key >>> 3, wire = key & 7;
    if (wire === 0) { yield [field, wire, varint()]; }
    else if (wire === 1) { yield [field, wire, buf.subarray(p, p + 8)]; p += 8; }
    else if (wire === 2) {
      const n = Number(varint());
      if (p + n > buf.length) throw new Error('truncated protobuf');
      yield [field, wire, buf.subarray(p, p + n)]; p += n;
    } else if (wire === 5) { yield [field, wire, buf.subarray(p, p + 4)]; p += 4; }
    else throw new Error(`unsupported protobuf wire type ${wire}`);
  }
}

function pbVarints(wire, value) {
  // A repeated varint field: packed (wire 2) or one value (wire 0).
  if (wire === 0) return [value];
  const out = [];
  let p = 0;
  while (p < value.length) {
    let r = 0n, s = 0n;
    for (;;) {
      const c = value[p++];
      r |= BigInt(c & 0x7f) << s;
      if (!(c & 0x80)) break;
      s += 7n;
    }
    out.push(r);
  }
  return out;
}

function toSigned64(v) { return BigInt.asIntN(64, v); }

// Decodes an ONNX TensorProto: {name, dtype, shape, data (typed array or
// null when only the header is wanted)}.
function decodeTensor(buf, withData = true) {
  const t = {name: '', onnxType: 0, shape: [], raw: null, floats: [], ints: [],
             int64s: [], doubles: [], external: false};
  for (const [f, w, v] of pbFields(buf)) {
    if (f === 1) t.shape.push(...pbVarints(w, v).map((x) => Number(toSigned64(x))));
    else if (f === 2) t.onnxType = Number(v);
    else if (f === 8) t.name = v.toString('utf8');
    else if (!withData) continue;
    else if (f === 9) t.raw = v;
    else if (f === 4) {
      if (w === 5) t.floats.push(v.readFloatLE(0));
      else for (let i = 0; i < v.length; i += 4) t.floats.push(v.readFloatLE(i));
    } else if (f === 5) t.ints.push(...pbVarints(w, v).map((x) => Number(BigInt.asIntN(32, x))));
    else if (f === 7) t.int64s.push(...pbVarints(w, v).map(toSigned64));
    else if (f === 10) {
      if (w === 1) t.doubles.push(v.readDoubleLE(0));
      else for (let i = 0; i < v.length; i += 8) t.doubles.push(v.readDoubleLE(i));
    } else if (f === 14 && Number(v) === 1) t.external = true;
  }
  const dtype = ONNX_TO_DTYPE[t.onnxType];
  const result = {name: t.name, dtype, onnxType: t.onnxType, shape: t.shape, data: null};
  if (!withData) return result;
  if (!dtype) throw new Error(`tensor '${t.name}': unsupported ONNX data_type ${t.onnxType}`);
  if (t.external) throw new Error(`tensor '${t.name}': external data is not supported`);
  const d = DTYPES[dtype];
  const n = numElements(t.shape);
  const ab = new ArrayBuffer(n * d.size);
  if (t.raw) {
    if (t.raw.length !== n * d.size)
      throw new Error(`tensor '${t.name}': raw_data has ${t.raw.length} bytes, expected ${n * d.size}`);
    new Uint8Array(ab).set(t.raw);
    result.data = new d.array(ab);
    return result;
  }
  const arr = new d.array(ab);
  // float16/bfloat16 typed values are bit patterns in int32_data.
  const src = dtype === 'float32' ? t.floats : dtype === 'float64' ? t.doubles
            : dtype === 'int64' ? t.int64s : t.ints;
  if (src.length !== n)
    throw new Error(`tensor '${t.name}': ${src.length} values, expected ${n}`);
  for (let i = 0; i < n; ++i) arr[i] = src[i];
  result.data = arr;
  return result;
}

function readPbTensor(file) {
  if (!fs.existsSync(file)) fail(`missing file ${file}`);
  try { return decodeTensor(fs.readFileSync(file)); }
  catch (e) { fail(`${file}: ${e.message}`); }
}

// The parts of an ONNX graph that input generation needs: nodes (inputs,
// outputs, op type, int attributes) and the shapes of initializers and
// Constant tensors.
function decodeGraph(modelFile) {
  const model = fs.readFileSync(modelFile);
  let graphBuf = null;
  for (const [f, , v] of pbFields(model)) if (f === 7) graphBuf = v;
  if (!graphBuf) throw new Error('no graph');
  const nodes = [];
  const shapes = new Map();  // tensor name -> shape of a known constant
  for (const [f, , v] of pbFields(graphBuf)) {
    if (f === 5) {
      const t = decodeTensor(v, false);
      shapes.set(t.name, t.shape);
    } else if (f === 1) {
      const node = {inputs: [], outputs: [], op: '', attrs: {}, tensorAttr: null};
      for (const [nf, , nv] of pbFields(v)) {
        if (nf === 1) node.inputs.push(nv.toString('utf8'));
        else if (nf === 2) node.outputs.push(nv.toString('utf8'));
        else if (nf === 4) node.op = nv.toString('utf8');
        else if (nf === 5) {
          let name = '', i = null, t = null;
          for (const [af, , av] of pbFields(nv)) {
            if (af === 1) name = av.toString('utf8');
            else if (af === 3) i = Number(toSigned64(av));
            else if (af === 5) t = av;
          }
          if (i !== null) node.attrs[name] = i;
          if (t && name === 'value') node.tensorAttr = decodeTensor(t, false);
        }
      }
      if (node.op === 'Constant' && node.tensorAttr)
        shapes.set(node.outputs[0], node.tensorAttr.shape);
      nodes.push(node);
    }
  }
  return {nodes, shapes};
}

//===----------------------------------------------------------------------===//
// onnxruntime-node
//===----------------------------------------------------------------------===//

function loadOrt() {
  const candidates = [];
  if (process.env.STPAR_ORT_NODE_MODULES)
    candidates.push(path.join(process.env.STPAR_ORT_NODE_MODULES, 'onnxruntime-node'));
  candidates.push(path.resolve(__dirname, '../../.deps/node/node_modules/onnxruntime-node'));
  for (const c of candidates) {
    if (fs.existsSync(path.join(c, 'package.json'))) {
      try { return require(c); }
      catch (e) { fail(`cannot load onnxruntime-node from ${c}: ${e.message}`); }
    }
  }
  try { return require('onnxruntime-node'); }
  catch (e) {
    fail(`onnxruntime-node not found (looked in ${candidates.join(', ')} and ` +
         `Node's module path); run scripts/install-deps.sh`);
  }
}

async function cmdRun(args) {
  const model = need(args, 'model');
  const io = loadIO(need(args, 'io'));
  const inDir = need(args, 'inputs');
  const outDir = need(args, 'outputs');
  if (!fs.existsSync(model)) fail(`missing model ${model}`);
  const ort = loadOrt();
  let session;
  try {
    session = await ort.InferenceSession.create(model, {executionProviders: ['cpu']});
  } catch (e) { fail(`${model}: onnxruntime cannot load the model: ${e.message}`); }

  const feeds = {};
  io.inputs.forEach((t, i) => {
    if (!session.inputNames.includes(t.name))
      fail(`io.json input ${i} '${t.name}' is not an input of ${model} ` +
           `(its inputs: ${session.inputNames.join(', ')})`);
    const data = readBin(path.join(inDir, t.file), t.dtype, t.shape);
    feeds[t.name] = new ort.Tensor(ORT_TYPE[t.dtype], data, t.shape);
  });
  const missing = session.inputNames.filter((n) => !(n in feeds));
  if (missing.length)
    fail(`${model} needs inputs that io.json does not list: ${missing.join(', ')}`);

  const wanted = io.outputs.map((t) => t.name);
  for (const n of wanted)
    if (!session.outputNames.includes(n))
      fail(`io.json output '${n}' is not an output of ${model} ` +
           `(its outputs: ${session.outputNames.join(', ')})`);
  let results;
  try { results = await session.run(feeds, wanted); }
  catch (e) { fail(`onnxruntime failed to run ${model}: ${e.message}`); }

  fs.mkdirSync(outDir, {recursive: true});
  io.outputs.forEach((t, i) => {
    const r = results[t.name];
    if (r.type !== ORT_TYPE[t.dtype])
      fail(`output ${i} '${t.name}': onnxruntime gives ${r.type}, io.json says ${t.dtype}`);
    const dims = Array.from(r.dims, Number);
    if (shapeStr(dims) !== shapeStr(t.shape))
      fail(`output ${i} '${t.name}': onnxruntime gives shape ${shapeStr(dims)}, ` +
           `io.json says ${shapeStr(t.shape)}`);
    let data = r.data;
    if (t.dtype === 'bool' && !(data instanceof Uint8Array))
      data = Uint8Array.from(data, (x) => (x ? 1 : 0));
    writeBin(path.join(outDir, t.file), data);
  });
  process.stderr.write(`ort-run: wrote ${io.outputs.length} reference output(s) to ${outDir}\n`);
}

//===----------------------------------------------------------------------===//
// Input generation
//===----------------------------------------------------------------------===//

// Ops an integer input passes through unchanged in value (as an index it
// stays an index): followed from their data operand to their outputs.
const PASS_THROUGH = new Set(['Cast', 'Reshape', 'Unsqueeze', 'Squeeze',
  'Flatten', 'Identity', 'Expand', 'Slice', 'Transpose', 'Concat', 'Tile',
  'Split', 'Gather']);

// The index bound of an integer input: the smallest axis size of the
// tables it indexes through Gather (directly or through PASS_THROUGH ops),
// or null when it indexes no table of known shape.
function indexBound(graph, name) {
  let bound = null;
  const seen = new Set([name]);
  const work = [name];
  while (work.length) {
    const value = work.pop();
    for (const node of graph.nodes) {
      const pos = node.inputs.indexOf(value);
      if (pos < 0) continue;
      if ((node.op === 'Gather' || node.op === 'GatherElements') && pos === 1) {
        const table = graph.shapes.get(node.inputs[0]);
        if (table && table.length) {
          let axis = node.attrs.axis || 0;
          if (axis < 0) axis += table.length;
          const size = table[axis];
          if (size > 0 && (bound === null || size < bound)) bound = size;
        }
        continue;  // the gathered values are table values, not indices
      }
      if (!PASS_THROUGH.has(node.op)) continue;
      // Only the data operand carries the index values (Gather's data, too:
      // gathering from an index tensor keeps indices).
      if (node.op !== 'Concat' && pos !== 0) continue;
      for (const out of node.outputs)
        if (out && !seen.has(out)) { seen.add(out); work.push(out); }
    }
  }
  return bound;
}

// mulberry32: a small seeded PRNG (uniform in [0, 1)).
function rng(seed) {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

function cmdGenInputs(args) {
  const model = need(args, 'model');
  const io = loadIO(need(args, 'io'));
  const outDir = need(args, 'outputs');
  const seed = Number(args.seed === undefined ? 0 : args.seed);
  if (!Number.isInteger(seed) || seed < 0) fail(`--seed must be a non-negative integer`);
  let graph;
  try { graph = decodeGraph(model); }
  catch (e) { fail(`${model}: cannot read the ONNX graph: ${e.message}`); }
  fs.mkdirSync(outDir, {recursive: true});
  io.inputs.forEach((t, i) => {
    const d = DTYPES[t.dtype];
    const n = numElements(t.shape);
    const arr = new d.array(n);
    // One stream per input: an input's values do not depend on the others.
    const rand = rng((seed * 1000003 + i * 7919 + 1) >>> 0);
    const isMask = /mask/i.test(t.name);
    let rule;
    if (t.dtype === 'float32' || t.dtype === 'float64' || isHalf(t.dtype)) {
      const put = isHalf(t.dtype)
                      ? (k, x) => { arr[k] = numberToHalf(t.dtype, x); }
                      : (k, x) => { arr[k] = x; };
      if (isMask) {
        rule = 'mask: 0 or 1';
        for (let k = 0; k < n; ++k)
          put(k, rand() < 0.5 ? 0 : 1);
      } else {
        rule = 'normal(0, 1)';
        for (let k = 0; k < n; k += 2) {
          // Box-Muller.
          const u = 1 - rand(), v = rand();
          const r = Math.sqrt(-2 * Math.log(u));
          put(k, r * Math.cos(2 * Math.PI * v));
          if (k + 1 < n)
            put(k + 1, r * Math.sin(2 * Math.PI * v));
        }
      }
    } else {
      let bound = t.dtype === 'bool' || isMask ? 2 : indexBound(graph, t.name);
      if (bound === null) bound = 2;
      rule = t.dtype === 'bool' ? 'bool: 0 or 1'
           : isMask ? 'mask: 0 or 1' : `uniform integers in [0, ${bound})`;
      for (let k = 0; k < n; ++k) {
        const v = Math.floor(rand() * bound);
        arr[k] = t.dtype === 'int64' ? BigInt(v) : v;
      }
    }
    writeBin(path.join(outDir, t.file), arr);
    process.stderr.write(`ort-run: input ${i} '${t.name}' ${t.dtype} ${shapeStr(t.shape)}: ${rule}\n`);
  });
}

function cmdFromPb(args) {
  const io = loadIO(need(args, 'io'));
  const pbDir = need(args, 'pb');
  const outDir = need(args, 'outputs');
  const partial = args.partial !== undefined && args.partial !== '0';
  fs.mkdirSync(outDir, {recursive: true});
  let converted = 0;
  io.inputs.forEach((t, i) => {
    const file = path.join(pbDir, `input_${i}.pb`);
    if (partial && !fs.existsSync(file))
      return;
    ++converted;
    const pb = readPbTensor(file);
    if (!sameDtype(pb.dtype, t.dtype))
      fail(`${file}: dtype ${pb.dtype || pb.onnxType}, io.json input ${i} '${t.name}' is ${t.dtype}`);
    if (shapeStr(pb.shape) !== shapeStr(t.shape))
      fail(`${file}: shape ${shapeStr(pb.shape)}, io.json input ${i} '${t.name}' is ${shapeStr(t.shape)}`);
    writeBin(path.join(outDir, t.file), pb.data);
  });
  if (partial && converted === 0 && io.inputs.length > 0)
    fail(`${pbDir}: no input_<i>.pb for any of the ${
        io.inputs.length} io.json input(s)`);
  process.stderr.write(
      `ort-run: converted ${converted} input(s) from ${pbDir}\n`);
}

//===----------------------------------------------------------------------===//
// Comparison
//===----------------------------------------------------------------------===//

function fmt(x) { return Number.isFinite(x) ? x.toExponential(3) : String(x); }

function cmdCompare(args) {
  const io = loadIO(need(args, 'io'));
  const actualDir = need(args, 'actual');
  const expectedDir = need(args, 'expected');
  const rtolArg = Number(args.rtol === undefined ? 1e-4 : args.rtol);
  const atolArg = Number(args.atol === undefined ? 1e-5 : args.atol);
  if (!(rtolArg > 0) || !(atolArg >= 0))
    fail('--rtol must be > 0 and --atol >= 0');
  const rtol = rtolArg, atol = atolArg;
  // rel_i = |a_i - b_i| / max(|b_i|, atol / rtol); PASS iff max rel <= rtol,
  // i.e. |a_i - b_i| <= max(rtol |b_i|, atol) for every element.
  let allPass = true;
  process.stdout.write(
      `tolerance: rtol=${rtol} atol=${atol} ` +
      `(rel = |a-b| / max(|b|, atol/rtol); integer and bool outputs exact; ` +
      `float16 at least rtol=${HALF_TOL.float16.rtol} atol=${
          HALF_TOL.float16.atol}, ` +
      `bfloat16 at least rtol=${HALF_TOL.bfloat16.rtol} atol=${
          HALF_TOL.bfloat16.atol})\n`);
  io.outputs.forEach((t, i) => {
    const actual = readBin(path.join(actualDir, t.file), t.dtype, t.shape);
    let expected;
    const bin = path.join(expectedDir, t.file);
    const pb = path.join(expectedDir, `output_${i}.pb`);
    if (fs.existsSync(bin)) expected = readBin(bin, t.dtype, t.shape);
    else {
      const tensor = readPbTensor(pb);
      if (!sameDtype(tensor.dtype, t.dtype) ||
          shapeStr(tensor.shape) !== shapeStr(t.shape))
        fail(`${pb}: ${tensor.dtype} ${shapeStr(tensor.shape)}, io.json output ${i} is ${t.dtype} ${shapeStr(t.shape)}`);
      expected = tensor.data;
    }
    const half = isHalf(t.dtype);
    const isFloat = t.dtype === 'float32' || t.dtype === 'float64' || half;
    // 16-bit outputs carry 11 (8) significant bits: the tolerance is at
    // least a few units in the last place of their type.
    const rtol = half ? Math.max(rtolArg, HALF_TOL[t.dtype].rtol) : rtolArg;
    const atol = half ? Math.max(atolArg, HALF_TOL[t.dtype].atol) : atolArg;
    const floor = atol / rtol;
    const num = half ? (x) => halfToNumber(t.dtype, x) : Number;
    let maxAbs = 0, maxRel = 0, bad = 0, worst = -1;
    for (let k = 0; k < actual.length; ++k) {
      const a = num(actual[k]), b = num(expected[k]);
      let abs, rel;
      if (Number.isNaN(a) || Number.isNaN(b)) {
        abs = rel = Number.isNaN(a) && Number.isNaN(b) ? 0 : Infinity;
      } else if (a === b) {
        abs = rel = 0;  // also equal infinities
      } else {
        abs = Math.abs(a - b);
        rel = isFloat ? abs / Math.max(Math.abs(b), floor) : Infinity;
      }
      if (abs > maxAbs || Number.isNaN(abs)) maxAbs = abs;
      if (rel > maxRel) { maxRel = rel; worst = k; }
      if (rel > rtol) ++bad;
    }
    const pass = bad === 0;
    allPass = allPass && pass;
    let line = `output ${i} ${t.name} ${t.dtype}${shapeStr(t.shape)}: ` +
        `max_abs_err=${fmt(maxAbs)} max_rel_err=${fmt(maxRel)} ${pass ? 'PASS' : 'FAIL'}`;
    if (!pass)
      line +=
          ` (${bad} of ${actual.length} elements over tolerance; worst at ` +
          `flat index ${worst}: got ${num(actual[worst])}, expected ${
              num(expected[worst])})`;
    process.stdout.write(line + '\n');
  });
  process.stdout.write(allPass ? 'verify: all outputs match\n' : 'verify: MISMATCH\n');
  process.exitCode = allPass ? 0 : 1;
}

//===----------------------------------------------------------------------===//

async function main() {
  const [cmd, ...rest] = process.argv.slice(2);
  const args = parseArgs(rest);
  switch (cmd) {
  case 'run': return cmdRun(args);
  case 'gen-inputs': return cmdGenInputs(args);
  case 'from-pb': return cmdFromPb(args);
  case 'compare': return cmdCompare(args);
  default:
    process.stderr.write('usage: ort-run.js run|gen-inputs|from-pb|compare ... ' +
                         '(see the comment at the top of this file)\n');
    process.exit(2);
  }
}

main().catch((e) => fail(e.stack || String(e)));
