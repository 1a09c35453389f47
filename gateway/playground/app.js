// Higgs-Audio gateway playground: plain JavaScript, no build step, no network beyond this gateway.
"use strict";

const SAMPLE_RATE = 24000; // the model's output: 24 kHz mono s16le
const $ = (id) => document.getElementById(id);
let audioContext = null;
const playing = new Set(); // sources scheduled or sounding, to stop on "Stop"; each leaves when it ends
const decisionHistory = []; // [time, {key: count}] snapshots for "recent" decisions

function audio() {
  if (!audioContext) audioContext = new AudioContext({ sampleRate: SAMPLE_RATE });
  if (audioContext.state === "suspended") audioContext.resume();
  return audioContext;
}

function apiHeaders(extra = {}) {
  const headers = { ...extra };
  const key = $("api-key").value.trim();
  if (key) headers["Authorization"] = `Bearer ${key}`;
  return headers;
}

async function errorMessage(response) {
  try {
    const body = await response.json();
    if (body && body.error && body.error.message) return body.error.message;
  } catch (_) { /* not JSON */ }
  return `HTTP ${response.status} ${response.statusText}`;
}

function showError(message) {
  const box = $("error");
  box.textContent = message;
  box.hidden = !message;
}

async function loadVoices(select) {
  const response = await fetch("/v1/audio/voices", { headers: apiHeaders() });
  if (!response.ok) { showError(`Voices: ${await errorMessage(response)}`); return; }
  const body = await response.json();
  const current = select || $("voice").value;
  const list = $("voice");
  list.innerHTML = "";
  for (const voice of body.voices || []) {
    const option = document.createElement("option");
    option.value = voice.id;
    option.textContent = voice.type === "uploaded" ? `${voice.id} (cloned)` : voice.id;
    list.appendChild(option);
  }
  if (current && [...list.options].some((o) => o.value === current)) list.value = current;
}

// One result card: what the response said and what the page measured.
function resultCard(title) {
  const card = document.createElement("div");
  card.className = "result";
  card.innerHTML = `<h4></h4><dl>
    <dt>pool</dt><dd data-field="pool">…</dd><dt>route reason</dt><dd data-field="reason">…</dd>
    <dt>request id</dt><dd data-field="request-id">…</dd><dt>TTFP</dt><dd data-field="ttfp">…</dd>
    <dt>RTF</dt><dd data-field="rtf">…</dd><dt>predicted</dt><dd data-field="predicted">…</dd>
    <dt>audio</dt><dd data-field="audio">…</dd></dl>
    <div class="state" data-field="state">sending…</div>`;
  card.querySelector("h4").textContent = title;
  const set = (field, value) => { card.querySelector(`[data-field="${field}"]`).textContent = value; };
  return { card, set };
}

// Reasons that mean "not where you asked": say why, on the card.
const REASON_NOTES = {
  no_ht_workers: "no high-throughput worker is routable yet (still starting or warming up), so low-latency served it",
  no_ll_workers: "no low-latency worker is routable yet (still starting or warming up), so high-throughput served it",
  pinned_pool: "Compare pinned it to this pool, so both profiles play even when routing by class would pick one",
};

// The adaptive policy's forecast for the pool it chose; other policies predict nothing.
function predictionText(headers) {
  const ttfp = headers.get("x-gateway-predicted-ttfp-ms");
  const rtf = headers.get("x-gateway-predicted-rtf");
  if (ttfp === null || rtf === null) return "– (policy does not predict)";
  return `TTFP ${ttfp} ms, RTF ${rtf}`;
}

function pcmToFloats(bytes) {
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  const out = new Float32Array(bytes.byteLength >> 1);
  for (let i = 0; i < out.length; i++) out[i] = view.getInt16(i * 2, true) / 32768;
  return out;
}

// Streams pcm into Web Audio as it arrives: the first sound follows the first chunk.
class PcmPlayer {
  constructor(pan) {
    const ctx = audio();
    this.ctx = ctx;
    this.output = ctx.createStereoPanner();
    this.output.pan.value = pan;
    this.output.connect(ctx.destination);
    this.nextTime = 0;
    this.carry = new Uint8Array(0);
    this.samples = 0;
    this.sources = new Set(); // this player's own, so one conversation can be stopped alone
  }
  // Schedules a chunk right after the previous one; returns when it starts (context time).
  push(chunk) {
    let bytes = chunk;
    if (this.carry.length) { bytes = new Uint8Array(this.carry.length + chunk.length); bytes.set(this.carry); bytes.set(chunk, this.carry.length); }
    const even = bytes.length & ~1;
    this.carry = bytes.slice(even);
    if (!even) return null;
    const floats = pcmToFloats(bytes.subarray(0, even));
    const buffer = this.ctx.createBuffer(1, floats.length, SAMPLE_RATE);
    buffer.copyToChannel(floats, 0);
    const source = this.ctx.createBufferSource();
    source.buffer = buffer;
    source.connect(this.output);
    this.nextTime = Math.max(this.nextTime, this.ctx.currentTime + 0.05);
    source.start(this.nextTime);
    const startsAt = this.nextTime;
    this.nextTime += buffer.duration;
    this.samples += floats.length;
    track(source);
    this.sources.add(source);
    source.addEventListener("ended", () => this.sources.delete(source));
    return startsAt;
  }
  get seconds() { return this.samples / SAMPLE_RATE; }
  // Silences this player at once: what is sounding and everything scheduled after it.
  stop() {
    for (const source of this.sources) { try { source.stop(); } catch (_) { /* already stopped */ } playing.delete(source); }
    this.sources.clear();
  }
}

function track(source) {
  playing.add(source);
  source.addEventListener("ended", () => playing.delete(source));
}

async function playWhole(bytes, pan) {
  const ctx = audio();
  const buffer = await ctx.decodeAudioData(bytes.buffer.slice(bytes.byteOffset, bytes.byteOffset + bytes.byteLength));
  const source = ctx.createBufferSource();
  const panner = ctx.createStereoPanner();
  panner.pan.value = pan;
  source.buffer = buffer;
  source.connect(panner).connect(ctx.destination);
  source.start();
  track(source);
  return buffer.duration;
}

// Sends one speech request, plays it and fills ``view`` as the response arrives.
// Whether the gateway honours x-gateway-pin-pool (routing.allow_pool_pin; on in the demo).
// Unknown until Compare tries; a gateway that refuses it compares the SLA classes instead.
let pinAllowed = true;

async function speak(sla, view, pan = 0, pinPool = null) {
  const format = $("format").value;
  const speed = parseFloat($("speed").value) || 1;
  const body = { model: "tts-1", input: $("text").value, voice: $("voice").value, response_format: format, speed };
  const streamed = format === "pcm" && speed === 1;
  if (streamed) body.stream_format = "audio";
  const headers = apiHeaders({ "Content-Type": "application/json" });
  if (sla) headers["X-SLA-Class"] = sla;
  const budget = $("budget").value.trim();
  if (budget) headers["X-SLA-TTFP-Ms"] = budget;
  const started = performance.now();
  let response;
  try {
    if (pinPool && pinAllowed) {
      response = await fetch("/v1/audio/speech", { method: "POST", headers: { ...headers, "X-Gateway-Pin-Pool": pinPool }, body: JSON.stringify(body) });
      if (response.status === 400 && (await response.clone().json().catch(() => ({}))).error?.code === "pool_pin_not_allowed") {
        pinAllowed = false;
        response = null;
      }
    }
    if (!response) response = await fetch("/v1/audio/speech", { method: "POST", headers, body: JSON.stringify(body) });
  } catch (err) {
    view.set("state", "failed");
    throw new Error(`Network error: ${err.message}`);
  }
  view.set("request-id", response.headers.get("x-request-id") || "–");
  if (!response.ok) {
    view.set("state", "failed");
    throw new Error(await errorMessage(response));
  }
  const pool = response.headers.get("x-gateway-pool") || "–";
  view.set("pool", pool);
  const reason = response.headers.get("x-gateway-route-reason") || "–";
  view.set("reason", REASON_NOTES[reason] ? `${reason}: ${REASON_NOTES[reason]}` : reason);
  view.card.dataset.reason = reason;
  view.set("predicted", predictionText(response.headers));
  view.card.classList.add(pool);
  view.card.dataset.pool = pool;
  const reader = response.body.getReader();
  const player = streamed ? new PcmPlayer(pan) : null;
  const parts = [];
  let received = 0;
  let ttfp = null;
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    if (!value || !value.length) continue;
    if (ttfp === null) {
      ttfp = performance.now() - started;
      view.set("ttfp", `${ttfp.toFixed(0)} ms`);
      view.card.dataset.ttfpMs = ttfp.toFixed(1);
      view.set("state", streamed ? "playing while streaming…" : "receiving…");
    }
    received += value.length;
    if (player) player.push(value); else parts.push(value);
  }
  const elapsed = (performance.now() - started) / 1000;
  let seconds = player ? player.seconds : 0;
  if (!player) {
    const whole = new Uint8Array(received);
    let offset = 0;
    for (const part of parts) { whole.set(part, offset); offset += part.length; }
    try { seconds = await playWhole(whole, pan); } catch (err) { view.set("state", `received ${received} bytes (browser cannot decode ${format})`); }
  }
  view.set("audio", `${seconds.toFixed(2)} s`);
  view.set("rtf", seconds > 0 ? (elapsed / seconds).toFixed(3) : "–");
  view.card.dataset.audioSeconds = seconds.toFixed(3);
  if (seconds > 0) {
    view.set("state", `played ${seconds.toFixed(2)} s from ${pool}`);
    view.card.dataset.played = "true";
  }
}

async function run(requests) {
  showError("");
  const results = $("results");
  results.innerHTML = "";
  for (const button of ["speak", "compare"]) $(button).disabled = true;
  try {
    const runs = requests.map(([title, sla, pan, pinPool]) => {
      const view = resultCard(title);
      results.appendChild(view.card);
      return speak(sla, view, pan, pinPool);
    });
    const outcomes = await Promise.allSettled(runs);
    const failed = outcomes.find((o) => o.status === "rejected");
    if (failed) showError(failed.reason.message);
  } finally {
    for (const button of ["speak", "compare"]) $(button).disabled = false;
  }
}

// --- conversation: a voice session fed the way an LLM streams its reply ---------------------
const CHARS_PER_TOKEN = 4; // the usual rough size of an English token
const FEED_TICK_MS = 50; // text goes out in the pieces due by each tick
let conversation = null; // the one running, for Interrupt

function sessionSocket() {
  const url = `${location.protocol === "https:" ? "wss" : "ws"}://${location.host}/v1/audio/speech/stream`;
  const key = $("api-key").value.trim();
  if (!key) return new WebSocket(url);
  // Browsers cannot set headers on a WebSocket: the key rides as a subprotocol, or, when it is
  // not a valid subprotocol token, as the documented query parameter.
  try {
    return new WebSocket(url, ["higgs-gateway", `bearer.${key}`]);
  } catch (_) {
    return new WebSocket(`${url}?api_key=${encodeURIComponent(key)}`);
  }
}

// One sentence of the reply as a list item: its text, the pool that serves it, its state.
function sentenceRow(index, text) {
  const row = document.createElement("li");
  row.dataset.index = String(index);
  row.innerHTML = '<div data-field="text"></div><div class="meta" data-field="meta"></div>';
  row.querySelector('[data-field="text"]').textContent = text;
  $("sentences").appendChild(row);
  return row;
}

class Conversation {
  constructor(text, tokensPerSecond) {
    this.text = text;
    this.charsPerSecond = tokensPerSecond * CHARS_PER_TOKEN;
    this.sentChars = 0;
    this.sentences = []; // {row, pool, reason, bytes, startsAt, endsAt, done, failed, state}
    this.receivedBytes = 0;
    this.heard = 0;
    this.utteranceDone = false;
    this.interrupted = false;
    this.finished = false;
    this.player = new PcmPlayer(0);
    this.socket = sessionSocket();
    this.socket.binaryType = "arraybuffer";
    this.socket.addEventListener("open", () => this.begin());
    this.socket.addEventListener("message", (event) => this.receive(event.data));
    this.socket.addEventListener("close", (event) => this.closed(event));
    this.ticker = setInterval(() => this.follow(), FEED_TICK_MS);
    this.setState("connecting", "connecting…");
  }

  setState(state, status) {
    $("conversation-card").dataset.state = state;
    $("conversation-status").textContent = status;
  }

  send(message) {
    if (this.socket.readyState === WebSocket.OPEN) this.socket.send(JSON.stringify(message));
  }

  begin() {
    this.send({
      type: "session.config", model: "tts-1", voice: $("voice").value, response_format: "pcm",
      stream_audio: true, split_granularity: "sentence", gateway_debug: true,
    });
    this.startedAt = performance.now();
    this.setState("streaming", "streaming text…");
    this.feeder = setInterval(() => this.feed(), FEED_TICK_MS);
    this.feed();
  }

  // Sends the characters due by now at the chosen rate; the last piece is followed by input.done.
  feed() {
    const due = Math.min(this.text.length, Math.floor(((performance.now() - this.startedAt) / 1000) * this.charsPerSecond));
    if (due > this.sentChars) {
      this.send({ type: "input.text", text: this.text.slice(this.sentChars, due) });
      this.sentChars = due;
    }
    if (this.sentChars >= this.text.length) {
      clearInterval(this.feeder);
      this.send({ type: "input.done" });
      this.setState("speaking", `all ${this.text.length} characters sent`);
    }
  }

  receive(data) {
    if (data instanceof ArrayBuffer) { this.audio(new Uint8Array(data)); return; }
    const message = JSON.parse(data);
    if (message.type === "audio.start") this.sentenceStarts(message);
    else if (message.type === "audio.done") this.sentenceDone(message);
    else if (message.type === "session.done") this.replyArrived();
    else if (message.type === "input.cancelled") this.cancelled(message);
    else if (message.type === "error") showError(`Conversation: ${message.message}`);
  }

  // Every sentence is in: close the session (its idle timer would end it while the page plays on).
  replyArrived() {
    this.utteranceDone = true;
    this.send({ type: "session.close" });
  }

  sentenceStarts(message) {
    const routing = message.gateway || {};
    const sentence = {
      row: sentenceRow(message.sentence_index, message.sentence_text), pool: routing.pool || "–", reason: routing.reason || "–",
      deadlineMs: routing.deadline_ms, predictedMs: routing.predicted_start_ms,
      bytes: 0, startsAt: null, endsAt: null, done: false, failed: false, state: "",
    };
    sentence.row.classList.add(sentence.pool);
    sentence.row.dataset.pool = sentence.pool;
    sentence.row.dataset.reason = sentence.reason;
    this.sentences.push(sentence);
    this.mark(sentence, this.interrupted ? "stopped" : "receiving");
  }

  audio(bytes) {
    this.receivedBytes += bytes.length; // counted after Interrupt too: the cancel answer counts them
    $("conversation-card").dataset.receivedBytes = String(this.receivedBytes);
    const sentence = this.sentences[this.sentences.length - 1];
    if (!sentence) return;
    sentence.bytes += bytes.length;
    if (this.interrupted) { this.mark(sentence, "stopped"); return; }
    const startsAt = this.player.push(bytes);
    if (sentence.startsAt === null && startsAt !== null) {
      sentence.startsAt = startsAt;
      sentence.row.dataset.startsAt = startsAt.toFixed(4);
    }
    sentence.endsAt = this.player.nextTime;
    sentence.row.dataset.endsAt = sentence.endsAt.toFixed(4);
    this.mark(sentence, sentence.state);
  }

  sentenceDone(message) {
    const sentence = this.sentences.find((s) => s.row.dataset.index === String(message.sentence_index));
    if (!sentence) return;
    sentence.done = true;
    sentence.failed = message.error;
    if (message.error) this.mark(sentence, "failed");
    else if (!sentence.bytes) this.mark(sentence, "no audio");
  }

  // Each tick: which sentence the listener hears now, and whether the reply is over.
  follow() {
    if (this.interrupted) return;
    const now = this.player.ctx.currentTime;
    for (const sentence of this.sentences) {
      if (sentence.startsAt === null || now < sentence.startsAt || ["failed", "stopped", "played"].includes(sentence.state)) continue;
      if (sentence.row.dataset.heard === undefined) {
        sentence.row.dataset.heard = String(this.heard++); // the order the listener heard them in
        $("now-playing").textContent = `now playing sentence ${Number(sentence.row.dataset.index) + 1} from ${sentence.pool} (${sentence.reason})`;
      }
      if (sentence.done && now >= sentence.endsAt) this.mark(sentence, "played");
      else if (sentence.state !== "playing") this.mark(sentence, "playing");
    }
    const over = this.sentences.every((s) => ["played", "failed", "no audio"].includes(s.state));
    if (this.utteranceDone && over) {
      $("now-playing").textContent = "";
      this.finish("done", `done: ${this.sentences.length} sentences, ${this.receivedBytes} bytes`);
    }
  }

  mark(sentence, state) {
    sentence.state = state;
    const row = sentence.row;
    row.dataset.state = state;
    row.classList.toggle("playing", state === "playing");
    row.classList.toggle("stopped", state === "stopped");
    const routing = [sentence.pool, sentence.reason];
    if (sentence.deadlineMs != null) routing.push(`deadline ${sentence.deadlineMs} ms`);
    if (sentence.predictedMs != null) routing.push(`predicted start ${sentence.predictedMs} ms`);
    row.querySelector('[data-field="meta"]').textContent = `${routing.join(" · ")} · ${sentence.bytes} bytes · ${state}`;
  }

  // Barge-in: silence at once, then ask the gateway to drop the rest of the reply.
  interrupt() {
    if (this.interrupted || this.finished) return;
    this.interrupted = true;
    clearInterval(this.feeder);
    this.player.stop();
    for (const sentence of this.sentences) if (sentence.state !== "played") this.mark(sentence, "stopped");
    $("now-playing").textContent = "";
    $("interrupt").disabled = true;
    if (this.utteranceDone) {
      // The whole reply had arrived and the session is closed: only the playback was left to stop.
      this.finish("interrupted", `stopped playback; the whole reply had arrived (${this.receivedBytes} bytes), nothing to cancel`);
      return;
    }
    this.setState("interrupting", "interrupting…");
    this.send({ type: "input.cancel" });
  }

  cancelled(message) {
    const card = $("conversation-card");
    card.dataset.cancelledBytes = String(message.total_bytes);
    this.finish("interrupted", `input.cancelled: utterance ${message.utterance_index}, ${message.total_bytes} bytes sent`);
    this.send({ type: "session.close" });
  }

  closed(event) {
    $("conversation-card").dataset.socket = "closed";
    if (this.finished) return;
    if (!this.utteranceDone) {
      this.player.stop();
      const why = event.reason || `the session closed (code ${event.code})`;
      showError(`Conversation: ${why}`);
      this.finish("failed", "session ended");
    }
  }

  finish(state, status) {
    if (this.finished) return;
    this.finished = true;
    clearInterval(this.feeder);
    clearInterval(this.ticker);
    this.setState(state, status);
    $("converse").disabled = false;
    $("interrupt").disabled = true;
    if (conversation === this) conversation = null;
  }
}

function startConversation() {
  showError("");
  const text = $("conversation-text").value;
  if (!text.trim()) { showError("Type or paste the reply to stream."); return; }
  const rate = parseFloat($("token-rate").value);
  if (!(rate > 0)) { showError("The token rate must be a positive number of tokens per second."); return; }
  $("sentences").innerHTML = "";
  $("now-playing").textContent = "";
  const card = $("conversation-card");
  for (const field of ["cancelledBytes", "receivedBytes", "socket"]) delete card.dataset[field];
  $("converse").disabled = true;
  $("interrupt").disabled = false;
  conversation = new Conversation(text, rate);
}

// --- voice cloning --------------------------------------------------------------------------
let recorded = null;
let recorder = null;

async function toggleRecording() {
  const button = $("record");
  if (recorder) { recorder.stop(); return; }
  try {
    const stream = await navigator.mediaDevices.getUserMedia({ audio: true });
    const chunks = [];
    recorder = new MediaRecorder(stream);
    recorder.ondataavailable = (event) => chunks.push(event.data);
    recorder.onstop = () => {
      stream.getTracks().forEach((track) => track.stop());
      recorded = new Blob(chunks, { type: recorder.mimeType || "audio/webm" });
      recorder = null;
      button.textContent = "Record";
      $("clone-status").textContent = `recorded ${(recorded.size / 1024).toFixed(0)} KB`;
    };
    recorder.start();
    button.textContent = "Stop recording";
  } catch (err) {
    showError(`Recording is not available: ${err.message}`);
  }
}

async function registerVoice() {
  showError("");
  const name = $("clone-name").value.trim();
  const file = $("clone-file").files[0];
  const sample = file || recorded;
  if (!name || !sample) { showError("Give the voice a name and record or choose a reference clip."); return; }
  if (!$("clone-consent").checked) { showError("Confirm the speaker's consent before cloning a voice."); return; }
  const form = new FormData();
  form.append("name", name);
  form.append("audio_sample", sample, file ? file.name : "recording.webm");
  form.append("consent", "speaker consented in the playground");
  const transcript = $("clone-text").value.trim();
  if (transcript) form.append("ref_text", transcript);
  $("clone-status").textContent = "registering…";
  const response = await fetch("/v1/audio/voices", { method: "POST", headers: apiHeaders(), body: form });
  if (!response.ok) {
    $("clone-status").textContent = "";
    showError(await errorMessage(response));
    return;
  }
  const body = await response.json();
  await loadVoices(body.voice.id);
  $("clone-status").textContent = `registered "${body.voice.id}"; selected above`;
}

// --- fleet view -----------------------------------------------------------------------------
function renderDecisions(decisions) {
  const counts = {};
  for (const { pool, reason, count } of decisions) counts[`${pool}\u0000${reason}`] = count;
  const now = Date.now();
  decisionHistory.push([now, counts]);
  while (decisionHistory.length > 1 && now - decisionHistory[0][0] > 60000) decisionHistory.shift();
  const [, oldest] = decisionHistory[0];
  const keys = Object.keys(counts).sort();
  if (!keys.length) { $("decisions").innerHTML = '<p class="status">no routing decisions yet</p>'; return; }
  const rows = keys.map((key) => {
    const [pool, reason] = key.split("\u0000");
    const recent = counts[key] - (oldest[key] || 0);
    return `<tr><td class="pool-${pool}">${pool}</td><td>${reason}</td><td>${recent}</td><td>${counts[key]}</td></tr>`;
  });
  $("decisions").innerHTML = `<table><tr><th>pool</th><th>reason</th><th>last minute</th><th>total</th></tr>${rows.join("")}</table>`;
}

const escapeHtml = (text) => String(text).replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`);

// A supervised GPU moving between pools (supervisor.profile_changes): wanted, under way, done.
function renderProfileChanges(changes) {
  const box = $("profile-changes");
  if (!changes || !changes.enabled) {
    box.innerHTML = '<p class="status">off: supervised GPUs keep their profile (supervisor.profile_changes)</p>';
    return;
  }
  const lines = [];
  const pending = changes.pending;
  if (pending) {
    lines.push(`<p class="status">wanted: ${pending.from_pool} → ${pending.to_pool} for ${Math.round(pending.wanted_for_s)} s of the ${Math.round(changes.hold_s)} s hold</p>`);
  }
  const current = changes.in_progress;
  if (current) {
    lines.push(`<p class="status" id="profile-change-now">in progress: ${current.worker} (GPU ${current.gpu}) ${current.from_pool} → ${current.to_pool}: ${current.phase}${current.new_worker ? ` as ${current.new_worker}` : ""}</p>`);
  }
  if (!pending && !current) lines.push('<p class="status">the running mix is the desired one</p>');
  const rows = (changes.recent || []).map((change) => {
    const at = new Date(change.finished_at * 1000).toLocaleTimeString();
    return `<tr><td>${at}</td><td class="pool-${change.from_pool}">${change.from_pool}</td><td class="pool-${change.to_pool}">${change.to_pool}</td>
      <td>${change.worker} → ${change.new_worker || "-"}</td><td>${change.result}</td><td>${escapeHtml(change.detail)}</td></tr>`;
  });
  if (rows.length) {
    lines.push(`<table><tr><th>finished</th><th>from</th><th>to</th><th>worker</th><th>result</th><th>detail</th></tr>${rows.join("")}</table>`);
  }
  box.innerHTML = lines.join("");
}

function renderPools(body) {
  const rows = [];
  for (const [poolName, pool] of Object.entries(body.pools || {})) {
    for (const worker of pool.workers) {
      const load = worker.reported_load ?? worker.inflight;
      const width = worker.slots ? Math.min(100, (100 * load) / worker.slots) : 0;
      rows.push(`<tr data-worker="${worker.id}"><td class="pool-${poolName}">${poolName}</td><td>${worker.id}</td>
        <td>${worker.state}${worker.drained ? " (drained)" : ""}${worker.retiring ? " (retiring: profile change)" : ""}</td>
        <td class="nowrap">${load} / ${worker.slots}</td><td class="bar-cell"><div class="bar"><div style="width:${width}%"></div></div></td></tr>`);
    }
  }
  const queued = Object.entries(body.queue_depths || {}).map(([sla, depth]) => `${sla}: ${depth}`).join(", ");
  $("fleet").innerHTML = `<table><tr><th>pool</th><th>worker</th><th>state</th><th>load / slots</th><th class="bar-cell"></th></tr>${rows.join("")}</table>
    <p class="status">queued in admission: ${queued || "none"}</p>`;
}

// /ready is open to everyone: say on the page when a pool cannot serve yet, and what that means.
function renderReadiness(body) {
  const empty = body.empty_pools || [];
  const box = $("readiness");
  if (!empty.length) { box.hidden = true; box.textContent = ""; return; }
  const names = empty.map((pool) => pool.replace("_", "-")).join(" and ");
  box.textContent = body.status === "not_ready"
    ? `No pool has a routable worker yet (${names} still starting or warming up): requests wait or fail until one is ready.`
    : `The ${names} pool has no routable worker yet (still starting or warming up): every request goes to the other pool until it is ready.`;
  box.hidden = false;
}

async function refreshFleet() {
  const token = $("admin-token").value.trim();
  try {
    const ready = await fetch("/ready");
    renderReadiness(await ready.json());
    if (!token) { $("fleet-status").textContent = "enter the admin token to see workers and routing decisions"; return; }
    const response = await fetch("/admin/fleet", { headers: { Authorization: `Bearer ${token}` } });
    if (!response.ok) { $("fleet-status").textContent = await errorMessage(response); return; }
    const fleet = await response.json();
    renderPools(fleet);
    renderDecisions(fleet.decisions || []);
    renderProfileChanges(fleet.profile_changes);
    $("fleet-status").textContent = `updated ${new Date().toLocaleTimeString()}`;
  } catch (err) {
    $("fleet-status").textContent = `gateway unreachable: ${err.message}`;
  }
}

function stopAll() {
  if (conversation) conversation.interrupt();
  for (const source of playing) { try { source.stop(); } catch (_) { /* already stopped */ } }
  playing.clear();
}

$("speak").addEventListener("click", () => run([["Speak", $("sla").value, 0]]));
// Both profiles side by side: low-latency in the left ear, high-throughput in the right.
$("compare").addEventListener("click", () => run([
  ["low-latency", "latency", -0.7, "low_latency"], ["high-throughput", "throughput", 0.7, "high_throughput"],
]));
$("stop").addEventListener("click", stopAll);
$("converse").addEventListener("click", startConversation);
$("interrupt").addEventListener("click", () => { if (conversation) conversation.interrupt(); });
$("record").addEventListener("click", toggleRecording);
$("clone").addEventListener("click", registerVoice);
$("api-key").addEventListener("change", () => loadVoices());
// The demo prints its playground link with the admin token after '#admin=': the fleet panel
// works out of the box, and the token never leaves the browser in a request line.
const linked = new URLSearchParams(location.hash.slice(1)).get("admin");
if (linked) { $("admin-token").value = linked; history.replaceState(null, "", location.pathname); }
loadVoices();
refreshFleet();
setInterval(refreshFleet, 1500);
