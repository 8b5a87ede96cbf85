// The ttsq web page's script (static/app.js): plain JavaScript, no framework, no build step.
//
// It is a file, not an inline <script>, because the page is served with a Content-Security-Policy
// that allows script, style and connections from this origin only (no inline script or style, no
// inline event handlers): handlers are attached here with addEventListener, never as attributes.
//
// API keys: a service that requires them answers 401 without one. The key is entered once in the
// "API key" panel, kept in this tab's sessionStorage (never localStorage, never in a URL) and sent
// as "Authorization: Bearer <key>" on every request the page makes. That is why progress events are
// read with fetch() and a stream reader rather than EventSource (which cannot send headers), and why
// the audio is fetched and handed to <audio> and the download link as a blob: URL.
"use strict";

// ---------------------------------------------------------------------------------------------
// Elements and per-run state
// ---------------------------------------------------------------------------------------------
const $ = (id) => document.getElementById(id);
const els = {
  form: $("tts-form"), modeText: $("mode-text"), modeSsml: $("mode-ssml"), textField: $("text-field"),
  ssmlField: $("ssml-field"), ssml: $("ssml"), text: $("text"), voice: $("voice"), voiceHint: $("voice-hint"), seed: $("seed"),
  speed: $("speed"), speedValue: $("speed-value"), format: $("format"), generate: $("generate"),
  notice: $("notice"), error: $("error"), status: $("status"), progress: $("progress"),
  player: $("player"), download: $("download"), seedPanel: $("seed-panel"), seedInfo: $("seed-info"),
  saveForm: $("save-form"), saveName: $("save-name"), saveVoice: $("save-voice"), useSeed: $("use-seed"),
  saveStatus: $("save-status"), keyPanel: $("key-panel"), keyState: $("key-state"), keyForm: $("key-form"),
  apiKey: $("api-key"), keyForget: $("key-forget"), keyStatus: $("key-status"),
};

const PCM_RATE = 24000;       // the stream endpoint sends PCM16 LE mono at 24 kHz
const POLL_MS = 800;          // fallback polling interval when the event stream is not available
const FIELD_NAMES = { text: "Text", ssml: "SSML", voice: "Voice", seed: "Seed", speed: "Speed", format: "Format", name: "Voice name" };

// A new Generate supersedes the previous run: everything a run starts is torn down through
// `current.cancel()`, and every async step checks `run.cancelled` before touching the page.
let current = null;
let lastSeed = null;          // the seed of the last random draw, offered for saving
let audioCtx = null;          // created on the first click (browsers allow audio only after a gesture)
let objectUrl = null;         // the blob URL of the current result, revoked when replaced

// ---------------------------------------------------------------------------------------------
// The API key: sessionStorage only, sent as a bearer token, never in a URL
// ---------------------------------------------------------------------------------------------
const KEY_STORAGE = "ttsq.apiKey";
const KEY_SHAPE = /^[\x21-\x7e]+$/;      // printable ASCII without spaces: what an HTTP header can carry

function readStoredKey() {
  try { return sessionStorage.getItem(KEY_STORAGE) || ""; } catch { return ""; }   // storage disabled
}

function writeStoredKey(key) {
  try {
    if (key) sessionStorage.setItem(KEY_STORAGE, key);
    else sessionStorage.removeItem(KEY_STORAGE);
  } catch { /* storage disabled: the key lives for this page only */ }
}

let apiKey = readStoredKey();
let keyReturnFocus = null;    // the control whose request asked for a key: focus goes back there
let authErrorShown = false;   // #error holds a 401/403 message, cleared once a key is entered

// Every request of the page goes through here: the key (when there is one) rides in a header.
// Without a key no Authorization header is sent at all, as before keys existed.
function api(path, init = {}) {
  const headers = { ...(init.headers || {}) };
  if (apiKey) headers.Authorization = `Bearer ${apiKey}`;
  return fetch(path, { ...init, headers, credentials: "same-origin" });
}

// A JSON body POSTed through api(), answered in JSON.
function postJson(path, payload) {
  return api(path, {
    method: "POST",
    headers: { "Content-Type": "application/json", Accept: "application/json" },
    body: JSON.stringify(payload),
  });
}

function isAuthFailure(response) { return response.status === 401 || response.status === 403; }

// 401: no key, or one the server refused; 403: a valid key without the scope the route needs.
// Native routes answer {"detail": "..."}; a 403 names the scope ("lacks the 'admin' scope ...").
function authMessage(response, body) {
  const detail = body && typeof body.detail === "string" ? body.detail.replace(/\.$/, "") : "";
  if (response.status === 401) {
    if (!apiKey) return "This service needs an API key: enter it under “API key”.";
    return `This service needs an API key, and it refused the one given${detail ? `: ${detail}` : ""}. Enter a valid key.`;
  }
  const scope = /'([A-Za-z0-9_:-]+)' scope/.exec(detail) || /\b([A-Za-z0-9_:-]+) scope\b/.exec(detail);
  return `This key may not do that (${scope ? `needs the ${scope[1]} scope` : (detail || "forbidden")}).`;
}

function keyMessage(text, isError) {
  els.keyStatus.textContent = text;
  els.keyStatus.classList.toggle("is-error", isError);
}

function renderKeyState() {
  els.keyState.textContent = apiKey ? "(set for this tab)" : "(none)";
}

// Open the key panel, say why, and put the focus in the key field. `returnTo` gets the focus back
// once a key is entered (the button whose request was refused).
function askForKey(text, returnTo) {
  els.keyPanel.open = true;
  keyMessage(text, true);
  if (apiKey) els.apiKey.setAttribute("aria-invalid", "true");
  keyReturnFocus = returnTo || null;
  els.apiKey.focus();
}

// A 401 or 403 from any request: the message where the user is looking (`show`), and for a 401
// the key field.
function handleAuthFailure(response, body, show, returnTo) {
  const text = authMessage(response, body);
  show(text);
  if (response.status === 401) askForKey(text, returnTo);
  return text;
}

async function useKey() {
  const key = els.apiKey.value.trim();
  clearInvalid([els.apiKey], "key-status");
  if (!key || !KEY_SHAPE.test(key)) {
    keyMessage(key ? "An API key has no spaces, and only ASCII letters, digits and punctuation."
                   : "Enter the key first (or “Forget the key” to send none).", true);
    els.apiKey.setAttribute("aria-invalid", "true");
    els.apiKey.setAttribute("aria-describedby", "api-key-hint key-status");
    els.apiKey.focus();
    return;
  }
  apiKey = key;
  els.apiKey.value = key;
  writeStoredKey(key);
  renderKeyState();
  keyMessage("Checking the key…", false);
  // The voice list is the first request with the new key: it also tells whether the key works.
  const status = await loadVoices();
  if (key !== apiKey) return;                       // replaced or forgotten meanwhile
  if (status === 401) { els.apiKey.focus(); return; } // loadVoices said why, the key stays to be fixed
  if (status !== 403) keyMessage("Key set for this browser tab: every request now sends it.", false);
  if (authErrorShown) { clearErrors(); setStatus("Ready."); }
  const back = keyReturnFocus;
  keyReturnFocus = null;
  if (back && !back.hidden) back.focus();
}

function forgetKey() {
  apiKey = "";
  els.apiKey.value = "";
  writeStoredKey("");
  renderKeyState();
  clearInvalid([els.apiKey], "key-status");
  keyMessage("Key forgotten: requests go without one.", false);
  els.apiKey.focus();
}

// ---------------------------------------------------------------------------------------------
// Small helpers
// ---------------------------------------------------------------------------------------------
// #status is an aria-live region: it changes only when there is news (not on every audio chunk).
let statusText = "Ready.";
let streamNote = "";
function renderStatus() { els.status.textContent = streamNote ? `${statusText} ${streamNote}` : statusText; }
function setStatus(text) { statusText = text; renderStatus(); }
function setStreamNote(note) {
  if (note === streamNote) return;
  streamNote = note;
  renderStatus();
}

function showError(text) {
  els.error.textContent = text;
  authErrorShown = false;
}

function showAuthError(text) {
  els.error.textContent = text;
  authErrorShown = true;
}

// Undo what validationMessage() marked: aria-invalid, and the message id in aria-describedby.
function clearInvalid(controls, messageId) {
  for (const el of controls) {
    el.removeAttribute("aria-invalid");
    const described = (el.getAttribute("aria-describedby") || "").split(" ").filter((d) => d && d !== messageId);
    if (described.length) el.setAttribute("aria-describedby", described.join(" "));
    else el.removeAttribute("aria-describedby");
  }
}

function clearErrors() {
  els.error.textContent = "";
  authErrorShown = false;
  clearInvalid([els.text, els.ssml, els.voice, els.seed, els.speed, els.format], "error");
}

function formatBytes(n) {
  if (n < 1024) return `${n} B`;
  if (n < 1024 * 1024) return `${(n / 1024).toFixed(1)} KB`;
  return `${(n / 1024 / 1024).toFixed(2)} MB`;
}

// Retry-After is either delta-seconds or an HTTP date (RFC 9110); null when absent or unreadable.
function retryAfterSeconds(response) {
  const value = response.headers.get("Retry-After");
  if (value === null) return null;
  if (/^\d+$/.test(value.trim())) return parseInt(value, 10);
  const when = Date.parse(value);
  return Number.isNaN(when) ? null : Math.max(0, Math.round((when - Date.now()) / 1000));
}

function retryMessage(response, body, what) {
  const seconds = retryAfterSeconds(response);
  const detail = body && typeof body.detail === "string" ? body.detail.replace(/\.$/, "") : "";
  // A 429 is a full queue, or this caller's rate limit ("too many requests ...").
  let headline = "the service is temporarily unavailable";
  if (response.status === 429) headline = /too many requests/i.test(detail) ? "too many requests" : "the queue is full";
  // The server's sentence when it already says it all, else the headline with it in brackets.
  let reason = headline;
  if (detail && detail.toLowerCase().includes(headline)) reason = detail;
  else if (detail) reason = `${headline} (${detail})`;
  const head = `${what}: ${reason}.`;
  if (seconds === null) return `${head} Please try again in a moment.`;
  const at = new Date(Date.now() + seconds * 1000).toLocaleTimeString();
  return `${head} Please retry in ${seconds} s (at ${at}).`;
}

// FastAPI's 422 body: {detail: [{loc: ["body", field], msg}]}. Name the field, say why, and
// mark the matching control invalid (described by the message element `messageId`) so a screen
// reader announces the reason when the control gets focus.
function validationMessage(body, fieldIds, messageId) {
  const items = Array.isArray(body && body.detail) ? body.detail : [];
  if (!items.length) return { text: `Invalid input: ${JSON.stringify(body && body.detail)}`, first: null };
  let first = null;
  const parts = items.map((item) => {
    const loc = Array.isArray(item.loc) ? item.loc : [];
    const field = String(loc.length ? loc[loc.length - 1] : "input");
    const control = fieldIds[field] ? $(fieldIds[field]) : null;
    if (control) {
      control.setAttribute("aria-invalid", "true");
      const described = (control.getAttribute("aria-describedby") || "").split(" ").filter(Boolean);
      if (!described.includes(messageId)) control.setAttribute("aria-describedby", [...described, messageId].join(" "));
      first = first || control;
    }
    // Pydantic prefixes messages from custom validators with "Value error, ": not for people.
    const msg = String(item.msg || "invalid").replace(/^Value error, /, "");
    return `${FIELD_NAMES[field] || field}: ${msg}`;
  });
  return { text: `Please fix the ${parts.length > 1 ? "fields" : "field"} — ${parts.join("; ")}`, first };
}

async function readJson(response) {
  try { return await response.json(); } catch { return null; }
}

function sleep(ms) { return new Promise((resolve) => setTimeout(resolve, ms)); }

// ---------------------------------------------------------------------------------------------
// Voices
// ---------------------------------------------------------------------------------------------
// GET /v1/voices: a list of voices (or {voices: [...]}); each a name or {name, kind, seed, builtin}.
// Returns the answer's HTTP status (0 when the server could not be reached).
async function loadVoices(select) {
  try {
    const response = await api("/v1/voices", { headers: { Accept: "application/json" } });
    if (isAuthFailure(response)) {
      const body = await readJson(response);
      const text = authMessage(response, body);
      els.voiceHint.textContent = response.status === 401
        ? "Could not load the voices: this service needs an API key (see “API key” below)."
        : `Could not load the voices. ${text}`;
      if (response.status === 401) {
        // Opened and explained on load; the focus moves only if the user is not already elsewhere.
        els.keyPanel.open = true;
        keyMessage(text, true);
        if (apiKey) els.apiKey.setAttribute("aria-invalid", "true");
        if (!document.activeElement || document.activeElement === document.body) els.apiKey.focus();
      } else {
        keyMessage(text, true);
      }
      return response.status;
    }
    if (!response.ok) throw new Error(`the server answered ${response.status}`);
    const body = await response.json();
    const list = Array.isArray(body) ? body : (body && Array.isArray(body.voices) ? body.voices : []);
    const keep = select === undefined ? els.voice.value : select;
    // Keep the first option ("no voice") and rebuild the rest.
    while (els.voice.options.length > 1) els.voice.remove(1);
    for (const entry of list) {
      const voice = typeof entry === "string" ? { name: entry } : entry;
      if (!voice || !voice.name) continue;
      const option = document.createElement("option");
      option.value = voice.name;
      const kind = voice.builtin ? "built-in" : (voice.seed !== undefined && voice.seed !== null ? `seed ${voice.seed}` : "saved");
      option.textContent = `${voice.name} (${kind})`;
      els.voice.append(option);
    }
    if ([...els.voice.options].some((o) => o.value === keep)) els.voice.value = keep;
    els.voiceHint.textContent = `${list.length} voice${list.length === 1 ? "" : "s"} available.`;
    dialogueVoices([...els.voice.options].slice(1).map((o) => o.value));
    return response.status;
  } catch (err) {
    els.voiceHint.textContent = `Could not load the voices (${err.message}); a seed or a random voice still works.`;
    return 0;
  }
}

// ---------------------------------------------------------------------------------------------
// Generate: submit, follow progress, stream, fetch the final result
// ---------------------------------------------------------------------------------------------
// Which input the form sends: "text", or "ssml" (an SSML document, sent in place of the text).
function inputMode() { return els.modeSsml.checked ? "ssml" : "text"; }

// Show the chosen input's field only: the hidden one is neither focusable nor sent.
function showInputMode() {
  const ssml = inputMode() === "ssml";
  els.ssmlField.hidden = !ssml;
  els.textField.hidden = ssml;
}

function requestBody() {
  // Exactly one of "text" and "ssml": the API refuses both, or neither.
  const body = inputMode() === "ssml" ? { ssml: els.ssml.value } : { text: els.text.value };
  body.speed = parseInt(els.speed.value, 10);
  body.format = els.format.value;
  if (els.voice.value) body.voice = els.voice.value;
  const seed = els.seed.value.trim();
  // Digits go as a number; anything else is sent as typed so the server's 422 names the field.
  if (seed !== "") body.seed = /^\d+$/.test(seed) ? Number(seed) : seed;
  // The page plays the task's stream as it is made where the browser can read one: its audio then comes in pieces.
  if (window.fetch && window.ReadableStream) body.listen = true;
  return body;
}

function resetResult() {
  if (current) current.cancel();
  current = null;
  for (const key of ["taskId", "lastStatus", "progressVia", "streamedBytes"]) delete document.body.dataset[key];
  clearErrors();
  els.notice.textContent = "";
  els.progress.hidden = true;
  els.progress.removeAttribute("value");
  els.player.pause();
  els.player.hidden = true;
  els.player.removeAttribute("src");
  els.player.load();
  els.download.hidden = true;
  els.seedPanel.hidden = true;
  els.saveStatus.textContent = "";
  streamNote = "";
  if (objectUrl) { URL.revokeObjectURL(objectUrl); objectUrl = null; }
}

function ensureAudioContext() {
  // Created (or resumed) inside the click/submit handler: autoplay policies need a user gesture.
  const Ctx = window.AudioContext || window.webkitAudioContext;
  if (!Ctx) return null;
  try {
    if (!audioCtx) audioCtx = new Ctx();
    if (audioCtx.state === "suspended") audioCtx.resume().catch(() => {});
  } catch { audioCtx = null; }
  return audioCtx;
}

async function generate() {
  if (els.generate.getAttribute("aria-busy") === "true") return;   // a submit is already on its way
  resetResult();
  const ctx = ensureAudioContext();
  const run = newRun();
  current = run;
  els.generate.setAttribute("aria-busy", "true");
  setStatus("Submitting…");
  let response;
  let body;
  try {
    response = await api("/v1/tts/submit", {
      method: "POST",
      headers: { "Content-Type": "application/json", Accept: "application/json" },
      body: JSON.stringify(requestBody()),
    });
    body = await readJson(response);
  } catch (err) {
    showError(`Could not reach the server (${err.message}). Check your connection and try again.`);
    setStatus("Not submitted.");
    return;
  } finally {
    els.generate.removeAttribute("aria-busy");
  }
  if (run.cancelled) return;

  if (isAuthFailure(response)) {
    handleAuthFailure(response, body, showAuthError, els.generate);
    setStatus("Not submitted.");
    return;
  }
  if (response.status === 422) {
    const fields = { text: "text", ssml: "ssml", voice: "voice", seed: "seed", speed: "speed", format: "format" };
    const { text, first } = validationMessage(body, fields, "error");
    showError(text);
    setStatus("Not submitted: the input needs a fix.");
    if (first) first.focus();
    return;
  }
  if (response.status === 429 || response.status === 503) {
    showError(retryMessage(response, body, "Not submitted"));
    setStatus("Not submitted.");
    return;
  }
  if (!response.ok || !body || !body.task_id) {
    const detail = body && typeof body.detail === "string" ? body.detail : `HTTP ${response.status}`;
    showError(`The request failed: ${detail}.`);
    setStatus("Not submitted.");
    return;
  }

  run.taskId = body.task_id;
  // State mirrored on <body data-*> for tests and for debugging from the console.
  document.body.dataset.taskId = run.taskId;
  if (body.notice) els.notice.textContent = `Note: ${body.notice}`;
  if (body.deterministic === false) offerSeed(body.seed);

  if (body.status === "done") {                      // 200: the cache answered, the audio is ready
    document.body.dataset.lastStatus = "done";
    run.cached = true;
    setStatus(`Done (from the cache). Loading the audio…`);
    await finish(run, null);
    return;
  }
  const how = body.joined ? "Joined an identical request already in progress" : "Queued";
  setStatus(`${how}: ${queueText(body.queue_position)}, about ${Math.max(1, Math.round(body.estimate_s))} s.`);
  els.progress.hidden = false;
  if (ctx) startStream(run, ctx);
  followProgress(run);
}

function newRun() {
  const run = {
    cancelled: false,
    taskId: null,
    finished: false,
    cleanups: [],
    streamedBytes: 0,
    playedFromStream: false,
    polling: false,
    // Everything this run started (event stream, polling, audio stream, scheduled buffers).
    cancel() {
      this.cancelled = true;
      for (const cleanup of this.cleanups.splice(0)) {
        try { cleanup(); } catch { /* already closed */ }
      }
    },
    // The task ended: stop following its progress, but let the audio stream play out.
    stopProgress() {
      for (const cleanup of this.cleanups.splice(0)) {
        if (cleanup.keepOnFinish) this.cleanups.push(cleanup);
        else { try { cleanup(); } catch { /* already closed */ } }
      }
    },
  };
  return run;
}

function queueText(position) {
  if (position === null || position === undefined) return "starting";
  if (position === 0) return "next in the queue";
  return `${position} job${position === 1 ? "" : "s"} ahead`;
}

// One status update, from the event stream or polling: {status, queue_position, chunks_done, chunks_total, error}.
function onStatus(run, s) {
  if (run.cancelled || run.finished) return;
  document.body.dataset.lastStatus = s.status;
  if (s.status === "queued") {
    // A queued task with an error is waiting for a retry after a failed attempt.
    setStatus(s.error ? `Queued for a retry after an error (${s.error}): ${queueText(s.queue_position)}.`
                      : `Queued: ${queueText(s.queue_position)}.`);
    els.progress.removeAttribute("value");          // indeterminate while waiting
  } else if (s.status === "running") {
    const total = s.chunks_total || 0;
    const done = s.chunks_done || 0;
    if (total > 0) {
      els.progress.max = total;
      els.progress.value = done;
      setStatus(`Synthesising: ${done} of ${total} chunk${total === 1 ? "" : "s"} done.`);
    } else {
      setStatus("Synthesising…");
    }
  } else if (s.status === "done") {
    run.finished = true;
    run.stopProgress();
    finish(run, s);
  } else if (s.status === "failed") {
    run.finished = true;
    run.stopProgress();
    els.progress.hidden = true;
    showError(`The synthesis failed: ${s.error || "no reason given"}.`);
    streamNote = "";
    setStatus("Failed.");
  }
}

// Server-sent events first, read with fetch() so that the key can ride in a header (EventSource
// cannot send one); polling when streams are missing, the stream is refused, or it breaks.
async function followProgress(run) {
  if (!window.ReadableStream || !window.TextDecoder || !window.AbortController) { poll(run); return; }
  const controller = new AbortController();
  run.cleanups.push(() => controller.abort());
  let response;
  try {
    response = await api(`/v1/tts/events/${encodeURIComponent(run.taskId)}`, {
      headers: { Accept: "text/event-stream" },
      cache: "no-store",
      signal: controller.signal,
    });
  } catch {
    // Refused, aborted by a proxy, a dropped connection: poll instead.
    if (!run.cancelled && !run.finished) poll(run);
    return;
  }
  if (run.cancelled || run.finished) { controller.abort(); return; }
  const type = response.headers.get("Content-Type") || "";
  if (!response.ok || !response.body || !type.startsWith("text/event-stream")) {
    // A 404, a 401 (polling says why), a proxy's error page: poll instead.
    controller.abort();
    poll(run);
    return;
  }
  document.body.dataset.progressVia = "events";
  try {
    await readEvents(response.body, (event) => {
      if (event.type !== "status") return;
      let data;
      try { data = JSON.parse(event.data); } catch { return; }
      onStatus(run, data);
    });
  } catch { /* aborted (the task ended or a new run began) or broken */ }
  // The stream ended or broke before the task did (EventSource would reconnect): poll for the rest.
  if (!run.cancelled && !run.finished) poll(run);
}

// A text/event-stream parser (the HTML standard's rules for the fields used here): lines end in
// CRLF, LF or CR; "event:" names the event, "data:" lines are joined with "\n", a line starting
// with ":" is a comment, a blank line dispatches. `onEvent` receives {type, data}.
async function readEvents(stream, onEvent) {
  const reader = stream.getReader();
  const decoder = new TextDecoder();
  let buffer = "";
  let type = "";
  let data = [];
  const takeLine = (line) => {
    if (line === "") {
      if (data.length) onEvent({ type: type || "message", data: data.join("\n") });
      type = "";
      data = [];
      return;
    }
    if (line.startsWith(":")) return;
    const colon = line.indexOf(":");
    const field = colon === -1 ? line : line.slice(0, colon);
    let value = colon === -1 ? "" : line.slice(colon + 1);
    if (value.startsWith(" ")) value = value.slice(1);
    if (field === "event") type = value;
    else if (field === "data") data.push(value);
  };
  try {
    for (;;) {
      const { value, done } = await reader.read();
      if (done) return;
      buffer += decoder.decode(value, { stream: true });
      for (let end = buffer.search(/[\r\n]/); end !== -1; end = buffer.search(/[\r\n]/)) {
        // A CR at the very end may be the first half of a CRLF: wait for the next chunk.
        if (buffer[end] === "\r" && end === buffer.length - 1) break;
        const width = buffer[end] === "\r" && buffer[end + 1] === "\n" ? 2 : 1;
        takeLine(buffer.slice(0, end));
        buffer = buffer.slice(end + width);
      }
    }
  } finally {
    reader.releaseLock();
  }
}

async function poll(run) {
  if (run.polling) return;
  run.polling = true;
  document.body.dataset.progressVia = "polling";
  let stopped = false;
  run.cleanups.push(() => { stopped = true; });
  while (!stopped && !run.cancelled && !run.finished) {
    try {
      const response = await api(`/v1/tts/tasks/${encodeURIComponent(run.taskId)}`, {
        headers: { Accept: "application/json" },
        cache: "no-store",
      });
      const body = await readJson(response);
      if (run.cancelled || stopped) return;
      if (response.ok && body) onStatus(run, body);
      else if (isAuthFailure(response)) {
        // The key was forgotten, revoked or swapped meanwhile: say so and stop following.
        run.finished = true;
        els.progress.hidden = true;
        handleAuthFailure(response, body, showAuthError, els.generate);
        setStatus("Stopped: the progress could not be read.");
        return;
      }
      else if (response.status === 404) {
        run.finished = true;
        showError("The task is no longer known to the server (its result may have expired).");
        setStatus("Lost.");
        return;
      }
      // 503 and other transient answers: keep polling.
    } catch { /* the network blinked; keep polling */ }
    await sleep(POLL_MS);
  }
}

// ---------------------------------------------------------------------------------------------
// Streaming playback: PCM16 chunks → AudioBuffers scheduled back to back on the Web Audio clock
// ---------------------------------------------------------------------------------------------
async function startStream(run, ctx) {
  if (!window.fetch || !window.ReadableStream) return;
  const controller = new AbortController();
  const sources = [];
  const stop = () => {
    controller.abort();
    for (const s of sources) { try { s.stop(); } catch { /* not started */ } }
  };
  // When the task is done the stream still has its last bytes to deliver and play:
  // only a new run (run.cancel) stops it, not the end of the progress updates.
  stop.keepOnFinish = true;
  run.cleanups.push(stop);

  let response;
  try {
    response = await api(`/v1/tts/stream/${encodeURIComponent(run.taskId)}?format=pcm`, { signal: controller.signal });
  } catch { return; }                                 // no streaming: the final <audio> still comes
  if (!response.ok || !response.body || response.status !== 200 || run.cancelled) return;

  const reader = response.body.getReader();
  let carry = null;                                   // an odd trailing byte, kept for the next read
  let nextTime = 0;                                   // where the next buffer starts on ctx's clock
  try {
    for (;;) {
      const { value, done } = await reader.read();
      if (done || run.cancelled) break;
      if (!value || !value.length) continue;
      let bytes = value;
      if (carry !== null) {
        bytes = new Uint8Array(value.length + 1);
        bytes[0] = carry;
        bytes.set(value, 1);
        carry = null;
      }
      if (bytes.length % 2 === 1) { carry = bytes[bytes.length - 1]; bytes = bytes.subarray(0, bytes.length - 1); }
      if (!bytes.length) continue;
      run.streamedBytes += bytes.length;
      document.body.dataset.streamedBytes = String(run.streamedBytes);
      // DataView reads little-endian regardless of the machine's byte order.
      const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.length);
      const samples = bytes.length / 2;
      const buffer = ctx.createBuffer(1, samples, PCM_RATE);   // Web Audio resamples to ctx's rate
      const channel = buffer.getChannelData(0);
      for (let i = 0; i < samples; i++) channel[i] = view.getInt16(i * 2, true) / 32768;
      const source = ctx.createBufferSource();
      source.buffer = buffer;
      source.connect(ctx.destination);
      // A small lead keeps the first buffer from starting in the past; later ones queue gaplessly.
      nextTime = Math.max(nextTime, ctx.currentTime + 0.05);
      source.start(nextTime);
      nextTime += buffer.duration;
      sources.push(source);
      run.playedFromStream = true;
      if (!run.finished) setStreamNote("Playing as it arrives.");
    }
  } catch { /* aborted or broken: the final result below is the source of truth */ }
}

// ---------------------------------------------------------------------------------------------
// The final result: <audio controls> and a download link with the size
// ---------------------------------------------------------------------------------------------
async function finish(run, status) {
  els.progress.hidden = true;
  const id = encodeURIComponent(run.taskId);
  let resultBytes = status && status.result_bytes;
  let format = els.format.value;
  try {
    // The event data may lack result_bytes; the task status has it.
    if (!resultBytes) {
      const response = await api(`/v1/tts/tasks/${id}`, { headers: { Accept: "application/json" }, cache: "no-store" });
      const body = response.ok ? await readJson(response) : null;
      if (body) { resultBytes = body.result_bytes; format = body.format || format; }
    }
  } catch { /* the blob size below will do */ }

  for (let attempt = 0; attempt < 60 && !run.cancelled; attempt++) {
    let response;
    try {
      // Fetched (with the key), then handed to <audio> and the link as a blob: URL: no key in a URL.
      response = await api(`/v1/tts/result/${id}`);
    } catch (err) {
      showError(`Could not download the audio (${err.message}).`);
      return;
    }
    if (response.status === 202) {                  // not stored yet: wait as the server says
      await sleep(1000 * (retryAfterSeconds(response) || 1));
      continue;
    }
    if (response.status === 409) {
      const body = await readJson(response);
      showError(`The synthesis failed: ${(body && body.error) || "no reason given"}.`);
      setStatus("Failed.");
      return;
    }
    if (response.status === 429 || response.status === 503) {
      const body = await readJson(response);
      showError(retryMessage(response, body, "Could not download the audio"));
      return;
    }
    if (isAuthFailure(response)) {
      const body = await readJson(response);
      handleAuthFailure(response, body, (text) => showAuthError(`Could not download the audio. ${text}`), els.generate);
      setStatus("Done, but the audio could not be downloaded.");
      return;
    }
    if (!response.ok) {
      showError(`Could not download the audio: HTTP ${response.status}.`);
      return;
    }
    const blob = await response.blob();
    if (run.cancelled) return;
    if (objectUrl) URL.revokeObjectURL(objectUrl);
    objectUrl = URL.createObjectURL(blob);
    const size = resultBytes || blob.size;
    els.player.src = objectUrl;
    els.player.hidden = false;
    els.download.href = objectUrl;
    els.download.download = `ttsq-${run.taskId.split(".")[0].slice(0, 8)}.${format}`;
    els.download.textContent = `Download ${format.toUpperCase()} (${formatBytes(size)})`;
    els.download.dataset.bytes = String(size);
    els.download.hidden = false;
    streamNote = "";
    setStatus(`Done${run.cached ? " (from the cache)" : ""}: ${formatBytes(size)} of ${format.toUpperCase()}.`);
    // Play now unless the stream already played it (playing twice would be confusing).
    if (!run.playedFromStream) els.player.play().catch(() => { /* autoplay refused: the controls are there */ });
    return;
  }
}

// ---------------------------------------------------------------------------------------------
// Keeping a randomly drawn voice
// ---------------------------------------------------------------------------------------------
function offerSeed(seed) {
  lastSeed = seed;
  els.seedInfo.textContent = `This voice is seed ${seed} — keep it: enter the seed next time, or save it as a named voice.`;
  els.seedPanel.hidden = false;
  els.saveStatus.textContent = "";
  els.saveStatus.classList.remove("is-error");
}

function saveMessage(text, isError) {
  els.saveStatus.textContent = text;
  els.saveStatus.classList.toggle("is-error", isError);
}

async function saveVoice() {
  clearInvalid([els.saveName], "save-status");
  const name = els.saveName.value.trim();
  if (lastSeed === null) return;
  let response;
  let body;
  try {
    response = await api("/v1/voices", {
      method: "POST",
      headers: { "Content-Type": "application/json", Accept: "application/json" },
      body: JSON.stringify({ name, seed: lastSeed }),
    });
    body = await readJson(response);
  } catch (err) {
    saveMessage(`Could not reach the server (${err.message}).`, true);
    return;
  }
  if (response.status === 201 || response.ok) {
    saveMessage(`Saved: the voice “${(body && body.name) || name}” (seed ${lastSeed}) is now in the voice list.`, false);
    await loadVoices((body && body.name) || name);
    els.seed.value = "";                           // the named voice now carries the speaker
  } else if (isAuthFailure(response)) {
    handleAuthFailure(response, body, (text) => saveMessage(`Not saved. ${text}`, true), els.saveVoice);
  } else if (response.status === 409) {
    saveMessage(`A voice named “${name}” already exists; choose another name.`, true);
    els.saveName.setAttribute("aria-invalid", "true");
    els.saveName.focus();
  } else if (response.status === 422) {
    const { text, first } = validationMessage(body, { name: "save-name" }, "save-status");
    saveMessage(text, true);
    if (first) first.focus();
  } else if (response.status === 429 || response.status === 503) {
    saveMessage(retryMessage(response, body, "Not saved"), true);
  } else {
    const detail = body && typeof body.detail === "string" ? body.detail : `HTTP ${response.status}`;
    saveMessage(`Not saved: ${detail}.`, true);
  }
}

// ---------------------------------------------------------------------------------------------
// Draw voices: POST /v1/voices/draw, long-poll GET /v1/voices/draw/{id}?wait=, then one row per
// candidate: its preview (fetched with the key, played from a blob: URL) and a name to save it under.
// ---------------------------------------------------------------------------------------------
const drawEls = {
  form: $("draw-form"), n: $("draw-n"), language: $("draw-language"), button: $("draw"),
  status: $("draw-status"), list: $("draw-list"),
};
let drawUrls = [];            // the previews' blob URLs, revoked when the next draw replaces them

function drawMessage(text, isError) {
  drawEls.status.textContent = text;
  drawEls.status.classList.toggle("is-error", Boolean(isError));
}

// A refused draw request, said where the user looks: 401/403, 422 (which field), 429/503 (when to retry).
function drawRefused(response, body, what) {
  if (isAuthFailure(response)) return handleAuthFailure(response, body, (text) => drawMessage(`${what}. ${text}`, true), drawEls.button);
  if (response.status === 422) return drawMessage(validationMessage(body, { n: "draw-n" }, "draw-status").text, true);
  if (response.status === 429 || response.status === 503) return drawMessage(retryMessage(response, body, what), true);
  const detail = body && typeof body.detail === "string" ? body.detail : `HTTP ${response.status}`;
  return drawMessage(`${what}: ${detail}.`, true);
}

async function drawVoices() {
  clearInvalid([drawEls.n], "draw-status");
  for (const url of drawUrls) URL.revokeObjectURL(url);
  drawUrls = [];
  drawEls.list.replaceChildren();
  drawEls.button.disabled = true;
  drawMessage("Drawing voices…", false);
  try {
    const started = await postJson("/v1/voices/draw", { n: parseInt(drawEls.n.value, 10), language: drawEls.language.value });
    let body = await readJson(started);
    if (started.status !== 202) { drawRefused(started, body, "No draw"); return; }
    while (body.status !== "done") {
      drawMessage(`Speaking the previews: ${body.previews_done} of ${body.previews_total} done…`, false);
      const polled = await api(`/v1/voices/draw/${encodeURIComponent(body.draw_id)}?wait=20`, { headers: { Accept: "application/json" } });
      const next = await readJson(polled);
      if (!polled.ok) { drawRefused(polled, next, "The draw failed"); return; }
      body = next;
    }
    for (const candidate of body.candidates) drawEls.list.append(await drawRow(candidate));
    drawMessage(`${body.candidates.length} voice${body.candidates.length === 1 ? "" : "s"} drawn, most different first.`, false);
  } catch (err) {
    drawMessage(`Could not reach the server (${err.message}).`, true);
  } finally {
    drawEls.button.disabled = false;
  }
}

async function drawRow(candidate) {
  const row = document.createElement("li");
  row.className = "draw-candidate";
  row.dataset.seed = String(candidate.seed);
  const info = document.createElement("p");
  const far = candidate.distance === null ? "distance unknown"
    : `distance ${candidate.distance.toFixed(2)} from ${candidate.nearest_voice}, the nearest voice`;
  info.textContent = `Seed ${candidate.seed} — ${far}`;
  const audio = document.createElement("audio");
  audio.controls = true;
  audio.preload = "auto";
  audio.setAttribute("aria-label", `Preview of seed ${candidate.seed}`);
  const preview = await api(candidate.preview_url);
  if (preview.ok) {
    const url = URL.createObjectURL(await preview.blob());
    drawUrls.push(url);
    audio.src = url;
  }
  const save = document.createElement("form");
  save.className = "draw-save";
  save.noValidate = true;
  const id = `draw-name-${candidate.seed}`;
  const label = document.createElement("label");
  label.htmlFor = id;
  label.textContent = "Save as";
  const name = document.createElement("input");
  Object.assign(name, { id, type: "text", maxLength: 64, autocomplete: "off" });
  const button = document.createElement("button");
  button.type = "submit";
  button.className = "secondary";
  button.textContent = "Save voice";
  const said = document.createElement("span");
  said.className = "message";
  said.setAttribute("role", "status");
  save.append(label, name, button, said);
  save.addEventListener("submit", (event) => { event.preventDefault(); saveDrawn(candidate.seed, name, said, button); });
  row.append(info, audio, save);
  return row;
}

async function saveDrawn(seed, nameInput, said, button) {
  const name = nameInput.value.trim();
  const show = (text, isError) => { said.textContent = text; said.classList.toggle("is-error", isError); };
  let response;
  let body;
  try {
    response = await postJson("/v1/voices", { name, seed });
    body = await readJson(response);
  } catch (err) {
    show(`Could not reach the server (${err.message}).`, true);
    return;
  }
  if (response.status === 201) {
    show(`Saved as “${body.name}”: it is in the voice list.`, false);
    await loadVoices(body.name);
  } else if (isAuthFailure(response)) {
    handleAuthFailure(response, body, (text) => show(`Not saved. ${text}`, true), button);
  } else if (response.status === 409) {
    show(`A voice named “${name}” already exists; choose another name.`, true);
  } else if (response.status === 422) {
    show(validationMessage(body, {}, "draw-status").text, true);
  } else {
    show(`Not saved: HTTP ${response.status}.`, true);
  }
}

// ---------------------------------------------------------------------------------------------
// Dialogue: speakers (a name and a voice each) and lines (a speaker and a text each), POSTed to
// /v1/tts/dialogue as one task; its result is long-polled (GET /v1/tts/result/{id}?wait=) and
// played from a blob: URL, as every other audio on this page.
// ---------------------------------------------------------------------------------------------
const dlg = {
  form: $("dialogue-form"), speakers: $("dialogue-speakers"), lines: $("dialogue-lines"),
  addSpeaker: $("add-speaker"), addLine: $("add-line"), gap: $("dialogue-gap"), format: $("dialogue-format"),
  button: $("dialogue-generate"), status: $("dialogue-status"), player: $("dialogue-player"),
  download: $("dialogue-download"),
};
let dialogueVoiceNames = [];  // the voices the caller sees, as the voice picker lists them
let dialogueUrl = null;       // the blob URL of the dialogue's audio, revoked when replaced
let dialogueRows = 0;         // a counter for the rows' element ids

function dialogueMessage(text, isError) {
  dlg.status.textContent = text;
  dlg.status.classList.toggle("is-error", Boolean(isError));
}

// A <select> of `values`, keeping its current choice when it is still one of them.
function fillSelect(select, values, fallback) {
  const keep = select.value || fallback;
  select.replaceChildren(...values.map((value) => {
    const option = document.createElement("option");
    option.value = value;
    option.textContent = value;
    return option;
  }));
  if (values.includes(keep)) select.value = keep;
}

function speakerNames() {
  return [...dlg.speakers.querySelectorAll("input.speaker-name")].map((input) => input.value.trim()).filter(Boolean);
}

// The speakers' names changed (typed, added, removed): every line's speaker list follows.
function refreshLineSpeakers() {
  const names = [...new Set(speakerNames())];
  for (const select of dlg.lines.querySelectorAll("select.line-speaker")) fillSelect(select, names, names[0]);
}

function dialogueVoices(names) {
  dialogueVoiceNames = names;
  dlg.speakers.querySelectorAll("select.speaker-voice").forEach((select, index) => {
    fillSelect(select, names, select.dataset.wanted || names[index % Math.max(1, names.length)]);
  });
}

function removeButton(what, row, after) {
  const button = document.createElement("button");
  button.type = "button";
  button.className = "secondary";
  button.textContent = "Remove";
  button.setAttribute("aria-label", `Remove this ${what}`);
  button.addEventListener("click", () => { row.remove(); after(); });
  return button;
}

function addSpeaker(name, voice) {
  const row = document.createElement("li");
  row.className = "dialogue-speaker";
  const number = ++dialogueRows;
  const input = document.createElement("input");
  Object.assign(input, { type: "text", id: `speaker-name-${number}`, value: name, maxLength: 64, autocomplete: "off" });
  input.className = "speaker-name";
  input.setAttribute("aria-label", "Speaker's name");
  input.addEventListener("input", refreshLineSpeakers);
  const select = document.createElement("select");
  select.className = "speaker-voice";
  select.id = `speaker-voice-${number}`;
  select.setAttribute("aria-label", "Speaker's voice");
  if (voice) select.dataset.wanted = voice;
  const index = dlg.speakers.children.length;
  fillSelect(select, dialogueVoiceNames, voice || dialogueVoiceNames[index % Math.max(1, dialogueVoiceNames.length)]);
  row.append(input, select, removeButton("speaker", row, refreshLineSpeakers));
  dlg.speakers.append(row);
  refreshLineSpeakers();
  return row;
}

function addLine(speaker, text) {
  const row = document.createElement("li");
  row.className = "dialogue-line";
  const number = ++dialogueRows;
  const select = document.createElement("select");
  select.className = "line-speaker";
  select.id = `line-speaker-${number}`;
  select.setAttribute("aria-label", "Who says it");
  const names = [...new Set(speakerNames())];
  fillSelect(select, names, speaker || names[dlg.lines.children.length % Math.max(1, names.length)]);
  const input = document.createElement("input");
  Object.assign(input, { type: "text", id: `line-text-${number}`, value: text || "", autocomplete: "off" });
  input.className = "line-text";
  input.setAttribute("aria-label", "What they say");
  row.append(select, input, removeButton("line", row, () => {}));
  dlg.lines.append(row);
  return row;
}

function dialogueBody() {
  const voices = {};
  for (const row of dlg.speakers.querySelectorAll("li.dialogue-speaker")) {
    const name = row.querySelector("input.speaker-name").value.trim();
    const voice = row.querySelector("select.speaker-voice").value;
    if (name && voice) voices[name] = voice;
  }
  const lines = [...dlg.lines.querySelectorAll("li.dialogue-line")].map((row) => ({
    speaker: row.querySelector("select.line-speaker").value,
    text: row.querySelector("input.line-text").value,
  }));
  const body = { lines, voices, format: dlg.format.value };
  const gap = dlg.gap.value.trim();
  // Digits go as a number; anything else is sent as typed so the server's 422 names the field.
  if (gap !== "") body.gap_ms = /^\d+$/.test(gap) ? Number(gap) : gap;
  return body;
}

// A 422 of the dialogue: its fields are nested (lines.2.text, voices.Bob), so the message names them as sent.
function dialogueInvalid(body) {
  const items = Array.isArray(body && body.detail) ? body.detail : [];
  const parts = items.map((item) => {
    const loc = (Array.isArray(item.loc) ? item.loc : []).slice(1).join(".") || "input";
    return `${loc}: ${String(item.msg || "invalid").replace(/^Value error, /, "")}`;
  });
  return parts.length ? `Please fix the dialogue — ${parts.join("; ")}` : "Please fix the dialogue.";
}

async function generateDialogue() {
  if (dlg.button.getAttribute("aria-busy") === "true") return;
  dlg.button.setAttribute("aria-busy", "true");
  dlg.player.pause();
  dlg.player.hidden = true;
  dlg.download.hidden = true;
  delete document.body.dataset.dialogueTaskId;
  try {
    dialogueMessage("Submitting the dialogue…", false);
    const response = await postJson("/v1/tts/dialogue", dialogueBody());
    const body = await readJson(response);
    if (isAuthFailure(response)) {
      handleAuthFailure(response, body, (text) => dialogueMessage(`Not submitted. ${text}`, true), dlg.button);
      return;
    }
    if (response.status === 422) { dialogueMessage(dialogueInvalid(body), true); return; }
    if (response.status === 429 || response.status === 503) { dialogueMessage(retryMessage(response, body, "Not submitted"), true); return; }
    if (!response.ok || !body || !body.task_id) {
      dialogueMessage(`Not submitted: ${(body && typeof body.detail === "string") ? body.detail : `HTTP ${response.status}`}.`, true);
      return;
    }
    document.body.dataset.dialogueTaskId = body.task_id;
    await dialogueResult(body.task_id);
  } catch (err) {
    dialogueMessage(`Could not reach the server (${err.message}).`, true);
  } finally {
    dlg.button.removeAttribute("aria-busy");
  }
}

// Long-polls the result: 202 with the task's status while it runs (progress shown), 200 with the audio.
async function dialogueResult(taskId) {
  const id = encodeURIComponent(taskId);
  dialogueMessage("Queued…", false);
  for (;;) {
    const response = await api(`/v1/tts/result/${id}?wait=20`);
    if (response.status === 202) {
      const status = await readJson(response);
      const total = status && status.chunks_total;
      dialogueMessage(total ? `Synthesising: ${status.chunks_done} of ${total} chunks done.` : "Synthesising…", false);
      continue;
    }
    if (!response.ok) {
      const body = await readJson(response);
      if (isAuthFailure(response)) {
        handleAuthFailure(response, body, (text) => dialogueMessage(`Could not fetch the audio. ${text}`, true), dlg.button);
      } else if (response.status === 429 || response.status === 503) {
        dialogueMessage(retryMessage(response, body, "Could not fetch the audio"), true);
      } else {
        dialogueMessage(`The dialogue failed: ${(body && (body.error || body.detail)) || `HTTP ${response.status}`}.`, true);
      }
      return;
    }
    const blob = await response.blob();
    if (dialogueUrl) URL.revokeObjectURL(dialogueUrl);
    dialogueUrl = URL.createObjectURL(blob);
    const format = dlg.format.value;
    dlg.player.src = dialogueUrl;
    dlg.player.hidden = false;
    dlg.download.href = dialogueUrl;
    dlg.download.download = `ttsq-dialogue-${taskId.split(".")[0].slice(0, 8)}.${format}`;
    dlg.download.textContent = `Download ${format.toUpperCase()} (${formatBytes(blob.size)})`;
    dlg.download.hidden = false;
    dialogueMessage(`Done: ${formatBytes(blob.size)} of ${format.toUpperCase()}. Press play to listen.`, false);
    return;
  }
}

// ---------------------------------------------------------------------------------------------
// Wiring
// ---------------------------------------------------------------------------------------------
els.form.addEventListener("submit", (event) => { event.preventDefault(); generate(); });
for (const textarea of [els.text, els.ssml]) {
  textarea.addEventListener("keydown", (event) => {
    // Enter writes a new line; Ctrl/Cmd+Enter generates.
    if (event.key === "Enter" && (event.ctrlKey || event.metaKey)) { event.preventDefault(); generate(); }
  });
}
for (const radio of [els.modeText, els.modeSsml]) radio.addEventListener("change", showInputMode);
els.speed.addEventListener("input", () => {
  els.speedValue.textContent = els.speed.value;
  els.speed.setAttribute("aria-valuetext", `speed ${els.speed.value} of 9`);
});
els.saveForm.addEventListener("submit", (event) => { event.preventDefault(); saveVoice(); });
els.useSeed.addEventListener("click", () => {
  if (lastSeed === null) return;
  els.voice.value = "";
  els.seed.value = String(lastSeed);
  els.seed.focus();
  saveMessage(`Seed ${lastSeed} is in the seed field: Generate keeps this voice.`, false);
});
els.keyForm.addEventListener("submit", (event) => { event.preventDefault(); useKey(); });
els.keyForget.addEventListener("click", forgetKey);
drawEls.form.addEventListener("submit", (event) => { event.preventDefault(); drawVoices(); });
dlg.form.addEventListener("submit", (event) => { event.preventDefault(); generateDialogue(); });
dlg.addSpeaker.addEventListener("click", () => {
  const row = addSpeaker(`Speaker ${dlg.speakers.children.length + 1}`, "");
  row.querySelector("input").focus();
});
dlg.addLine.addEventListener("click", () => { addLine("", "").querySelector("input").focus(); });
addSpeaker("Alice", "");
addSpeaker("Bob", "");
addLine("Alice", "Hello Bob, how are you today?");
addLine("Bob", "Very well, thank you, Alice.");

showInputMode();               // a reload may restore the SSML choice
els.apiKey.value = apiKey;
renderKeyState();
loadVoices();
