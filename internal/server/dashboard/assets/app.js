// The ratekeeper dashboard: polls ../v1/status and ../v1/top every 2 s.
// Every value is written with textContent (see el): rule names and keys
// come from configuration and clients, and must never become HTML.
'use strict';

const POLL_MS = 2000;
const TOP_N = 10;
const TOKEN_KEY = 'ratekeeper.admin-token'; // in sessionStorage only

const $ = (id) => document.getElementById(id);

let timer = null;
let running = false;
let pending = false;
let paused = false;
let previous = null; // the last Status, for rates

class Unauthorized extends Error {}

// el builds an element; strings among children become text nodes.
function el(tag, className, ...children) {
  const e = document.createElement(tag);
  if (className) e.className = className;
  for (const c of children) e.append(c instanceof Node ? c : document.createTextNode(String(c)));
  return e;
}

function setText(id, text, className) {
  const e = $(id);
  e.textContent = text;
  e.className = className || '';
}

function token() {
  return sessionStorage.getItem(TOKEN_KEY) || '';
}

async function getJSON(path) {
  const headers = {};
  const t = token();
  if (t) headers.Authorization = 'Bearer ' + t;
  const res = await fetch(path, { headers, cache: 'no-store', credentials: 'omit', redirect: 'error' });
  if (res.status === 401) throw new Unauthorized('the admin listener refused the token');
  if (!res.ok) {
    let msg = res.status + ' ' + res.statusText;
    try { msg = (await res.json()).error || msg; } catch (_) { /* not JSON */ }
    throw new Error(path.replace(/\?.*/, '') + ': ' + msg);
  }
  return res.json();
}

function when(iso) {
  const ms = Date.parse(iso);
  if (!iso || isNaN(ms) || ms <= 0) return 'never';
  return new Date(ms).toLocaleString() + ' (' + ago((Date.now() - ms) / 1000) + ')';
}

function ago(s) {
  if (s < 0) return 'ahead of this browser\'s clock';
  if (s < 120) return Math.round(s) + ' s ago';
  if (s < 7200) return Math.round(s / 60) + ' min ago';
  if (s < 172800) return Math.round(s / 3600) + ' h ago';
  return Math.round(s / 86400) + ' days ago';
}

function rate(now, before, field, seconds) {
  if (!before || !(seconds > 0) || now[field] < before[field]) return '–';
  const r = (now[field] - before[field]) / seconds;
  return r >= 100 ? r.toFixed(0) : r.toFixed(1);
}

function showStore(s) {
  setText('store-url', s.url || '–');
  setText('store-mode', s.mode || '–');
  setText('store-health', s.healthy ? 'healthy' : 'unhealthy' + (s.detail ? ': ' + s.detail : ''), s.healthy ? 'good' : 'bad');
  const b = s.breaker || 'none';
  setText('store-breaker', b, b === 'closed' || b === 'none' ? 'good' : 'bad');
}

function showReload(r) {
  setText('reload-time', when(r.time));
  setText('reload-result', r.ok ? 'ok' : 'failed: ' + (r.error || 'no reason given'), r.ok ? 'good' : 'bad');
}

function showRules(st) {
  let seconds = 0;
  const before = new Map();
  if (previous) {
    seconds = (Date.parse(st.time) - Date.parse(previous.time)) / 1000;
    for (const r of previous.rules || []) before.set(r.name, r);
  }
  const rows = (st.rules || []).map((r) => {
    const b = before.get(r.name);
    return el('tr', '',
      el('td', 'name', r.name), el('td', '', r.mode || ''), el('td', '', r.limit || ''),
      el('td', 'num', rate(r, b, 'allowed', seconds)),
      el('td', r.refused > (b ? b.refused : 0) ? 'num refused' : 'num', rate(r, b, 'refused', seconds)),
      el('td', 'num', rate(r, b, 'shadow', seconds)));
  });
  if (rows.length === 0) rows.push(el('tr', '', el('td', 'muted', 'no rules')));
  $('rules').tBodies[0].replaceChildren(...rows);
}

function topCard(t) {
  const entries = (t.entries || []).slice().sort((a, b) => b.count - a.count);
  const head = el('h3', '', t.rule, ' ', el('span', 'kind', t.kind === 'near' ? 'near the limit' : t.kind));
  const note = el('p', 'muted',
    'total ' + t.total + ' over ' + t.span + '; each count ± its error (at most ' + t.bound +
    '); a key not listed has at most ' + t.floor + '.');
  const rows = entries.map((e) => el('tr', '',
    el('td', 'key', e.key), el('td', 'num', String(e.count)), el('td', 'num muted', '± ' + e.error)));
  if (rows.length === 0) rows.push(el('tr', '', el('td', 'muted', 'none')));
  const table = el('table', 'top',
    el('thead', '', el('tr', '', el('th', '', 'Key'), el('th', 'num', 'Count'), el('th', 'num', 'Error'))),
    el('tbody', '', ...rows));
  return el('div', 'card', head, note, table);
}

function showTop(ans) {
  const order = { refused: 0, near: 1 };
  const lists = (ans.rules || []).slice().sort((a, b) =>
    (order[a.kind] ?? 2) - (order[b.kind] ?? 2) || (a.rule < b.rule ? -1 : a.rule > b.rule ? 1 : 0));
  const cards = lists.map(topCard);
  if (cards.length === 0) cards.push(el('p', 'muted', 'no limited clients'));
  $('top').replaceChildren(...cards);
}

function showError(id, err) {
  const e = $(id);
  e.hidden = !err;
  e.textContent = err ? String(err.message || err) : '';
}

function askToken(msg) {
  paused = true;
  clearTimeout(timer);
  $('auth').hidden = false;
  $('forget').hidden = true;
  $('auth-msg').textContent = msg || '';
  $('token').focus();
}

async function refresh() {
  const topPath = '../v1/top?n=' + TOP_N + '&span=' + encodeURIComponent($('span').value) +
    '&scope=' + encodeURIComponent($('scope').value);
  const [st, top] = await Promise.allSettled([getJSON('../v1/status'), getJSON(topPath)]);
  for (const r of [st, top]) {
    if (r.status === 'rejected' && r.reason instanceof Unauthorized) {
      askToken(token() ? 'that token was refused' : '');
      return;
    }
  }
  $('auth').hidden = true;
  $('forget').hidden = !token();
  if (st.status === 'fulfilled') {
    showStore(st.value.store || {});
    showReload(st.value.reload || {});
    showRules(st.value);
    previous = st.value;
    setText('updated', 'updated ' + new Date().toLocaleTimeString(), 'muted');
  }
  showError('error', st.status === 'rejected' ? st.reason : null);
  if (top.status === 'fulfilled') showTop(top.value);
  showError('top-error', top.status === 'rejected' ? top.reason : null);
}

async function poll() {
  clearTimeout(timer);
  if (running) { pending = true; return; }
  running = true;
  try {
    await refresh();
  } catch (err) {
    showError('error', err);
  } finally {
    running = false;
  }
  if (pending) { pending = false; poll(); return; }
  if (!paused) timer = setTimeout(poll, POLL_MS);
}

function start() {
  $('auth').addEventListener('submit', (ev) => {
    ev.preventDefault();
    const t = $('token').value.trim();
    $('token').value = '';
    if (!t) return;
    sessionStorage.setItem(TOKEN_KEY, t);
    paused = false;
    poll();
  });
  $('forget').addEventListener('click', () => {
    sessionStorage.removeItem(TOKEN_KEY);
    previous = null;
    askToken('');
  });
  $('span').addEventListener('change', poll);
  $('scope').addEventListener('change', poll);
  poll();
}

start();
