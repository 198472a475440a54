// The pipehub chat box: create or join a seated game, play it, or watch one.
//
// The page holds no game rules. The hub is the one referee: the page draws the player's
// own move at once (so the box feels instant), sends it over the WebSocket relay, and
// redraws from the hub's next `game.state`. A refused move is answered `game.refused`
// followed by the true `game.state`, which takes the early drawing back. Legality is never
// decided here; the page only refrains from sending when it is plainly not the seat's turn.
//
// Everything that came from the network is put into the page as text (`textContent`),
// never as HTML: game ids, protocol names and boards are other people's strings.
//
// The tab's game lives in sessionStorage, so a reload resumes it. Every seat taken in this
// browser is also kept in localStorage ("Your games" in the lobby), so that closing the tab
// or going back to the lobby does not lose a seat whose game goes on (an open game counts
// against its host's cap until it ends); a seat is forgotten when its game is cancelled,
// its token stops working, or the player leaves a finished game or forgets it. The page
// talks only to its own origin (the CSP says so).
'use strict';

(function () {
  const STORE_KEY = 'pipehub.session';
  const SEATS_KEY = 'pipehub.seats';
  const SEATS_MAX = 50;
  const LIST_PAGE = 20;
  const LOG_MAX = 60;
  const RETRY_MAX_MS = 10000;
  const PENDING_MAX_MS = 15000;
  // How long "Copied." stays beside the Copy button.
  const COPY_SAID_MS = 4000;
  // The tab's title; a game in view adds whose turn it is, or that it is over, so that a
  // tab in the background tells it.
  const TITLE = 'pipehub';
  const CHOICES = ['rock', 'paper', 'scissors'];
  // The built-in games' rules in words, in the order people think of a board; other rules
  // follow by their own names.
  const RULE_LABELS = { rows: 'Rows', cols: 'Columns', winLength: 'In a row to win', bestOf: 'Best of' };
  const ruleLabel = (name) => RULE_LABELS[name] || name;

  const $ = (id) => document.getElementById(id);

  const S = {
    protocols: [],
    session: null, // {mode: 'seat', inbox, game, seat, token, pairingCode?, expiresAt?} | {mode: 'watch', inbox, game}
    truth: null, // the last game.state from the hub
    pending: null, // {ref, move}: a move drawn early, not yet answered
    myChoice: null, // {round, choice}: this seat's rock-paper-scissors choice of a round
    ws: null,
    retry: 0,
    retryTimer: null,
    refCounter: 0,
    boardKey: '',
    checked: null, // {game, seq}: the board the last chain check was made on
    listInbox: null, // the inbox the watch list shows, and where its next page starts
    listNext: null,
    listAsked: 0, // how many listings were asked for: only the latest one's answer is shown
    expiryTimer: null,
    news: '', // what the last game.state told that this page did not do itself, for the status line
    skew: 0, // the hub's clock minus this computer's, in ms, from its answers' Date header
  };

  // What a refusal means, for people; the hub's code follows in brackets for diagnosis.
  const REASONS = {
    occupied: 'that square is taken',
    column_full: 'that column is full',
    out_of_bounds: 'that is off the board',
    wrong_player: 'it is not your turn',
    after_end: 'the game is over',
    stale_seq: 'the board changed before your move arrived; try again',
    bad_seq: 'the board changed before your move arrived; try again',
    phase: 'that is not possible at this point of the round',
    'bestOf:odd': 'best of must be an odd number',
    already_chosen: 'you chose already this round; choose again in the next',
    bad_move: 'that is not a move of this game',
    rate_limited: 'too many actions at once',
    not_started: 'the game has not started yet',
    unavailable: 'the hub cannot take this right now; try again shortly',
    code_used: 'this code was used already, or a newer one replaced it, or its game was cancelled',
    code_expired: 'this code has expired; ask for a new one',
    too_many_games: 'you have too many open games; finish, resign or cancel one first',
    already_paired: 'your opponent has already joined',
    idempotency_key_reused: 'that create was sent too long ago to be answered again; press Create once more',
    bad_rules: 'a rule is out of range',
    bad_number: 'numbers must be whole numbers',
    forbidden: 'this seat may not do that',
    unauthorized: 'this seat is no longer valid',
  };

  // ---------- small helpers ----------

  function el(tag, props, text) {
    const node = document.createElement(tag);
    if (props) {
      for (const [k, v] of Object.entries(props)) {
        if (k === 'class') node.className = v;
        else if (k.startsWith('data-') || k.startsWith('aria-') || k === 'role') node.setAttribute(k, v);
        else node[k] = v;
      }
    }
    if (text !== undefined) node.textContent = text;
    return node;
  }

  // Writes only what changed, so screen readers announce real changes and nothing flickers.
  function setText(node, text) {
    if (node.textContent !== text) node.textContent = text;
  }

  function setAttr(node, name, value) {
    if (node.getAttribute(name) !== value) node.setAttribute(name, value);
  }

  // Writes a message made of parts: strings, and the hub's reasons ({words, code}, from
  // `reason`). A reason's words are read out; its code follows them in brackets, shown for
  // diagnosis but hidden from screen readers, which the words already told.
  function say(node, parts) {
    node.textContent = '';
    for (const part of parts) {
      if (typeof part === 'string') {
        node.append(part);
      } else if (part) {
        node.append(part.words);
        if (part.code) node.appendChild(el('span', { class: 'reason-code', 'aria-hidden': 'true' }, ' (' + part.code + ')'));
      }
    }
  }

  // A lobby message (role="alert"): showAlert('Could not join: ', reason, '.').
  function showAlert(...parts) {
    const alert = $('alert');
    say(alert, parts);
    alert.hidden = alert.textContent === '';
    // It sits above the lobby's forms: on a phone, the form that caused it is often far
    // below, and the message would be out of sight.
    if (!alert.hidden) {
      const box = alert.getBoundingClientRect();
      if (box.top < 0 || box.bottom > window.innerHeight) alert.scrollIntoView({ block: 'nearest' });
    }
  }

  // The message log is a history to read back, not a live region: what happens is told
  // once, by the status line or the notice, and the log keeps it.
  function log(message) {
    const list = $('log');
    list.appendChild(el('li', null, message));
    while (list.children.length > LOG_MAX) list.removeChild(list.firstChild);
    list.scrollTop = list.scrollHeight;
  }

  // A message about the game in view, next to its board (the log may be off screen).
  function showNotice(...parts) {
    const notice = $('notice');
    const text = parts.map((p) => (typeof p === 'string' ? p : p ? p.words + (p.code ? ' (' + p.code + ')' : '') : '')).join('');
    if (notice.textContent !== text) say(notice, parts);
    notice.hidden = text === '';
  }

  // `state` is also the body's `data-conn`; the footer says it in words ("offline" in the
  // lobby looked like a fault: no game is open there, so nothing is connected).
  const CONN_WORDS = { offline: 'none (no game open)' };
  function setConn(state) {
    $('conn').textContent = CONN_WORDS[state] || state;
    document.body.dataset.conn = state;
  }

  function saveSession() {
    try {
      if (S.session) sessionStorage.setItem(STORE_KEY, JSON.stringify(S.session));
      else sessionStorage.removeItem(STORE_KEY);
    } catch (e) {
      // Storage can be disabled; the game still plays, only a reload will not resume it.
    }
  }

  function loadSession() {
    try {
      const raw = sessionStorage.getItem(STORE_KEY);
      const s = raw ? JSON.parse(raw) : null;
      if (s && typeof s.inbox === 'string' && typeof s.game === 'string') return s;
    } catch (e) {
      // A damaged entry is forgotten below.
    }
    return null;
  }

  // ---------- the seats this browser holds ----------

  function loadSeats() {
    try {
      const list = JSON.parse(localStorage.getItem(SEATS_KEY) || '[]');
      return Array.isArray(list) ? list.filter((x) => x && typeof x.token === 'string' && typeof x.game === 'string') : [];
    } catch (e) {
      return [];
    }
  }

  function storeSeats(list) {
    try {
      localStorage.setItem(SEATS_KEY, JSON.stringify(list.slice(-SEATS_MAX)));
    } catch (e) {
      // Storage can be disabled or full; the tab's own game still plays.
    }
    renderSeats();
  }

  // Whether this browser lets the page keep seats (storage can be switched off).
  function canKeepSeats() {
    try {
      localStorage.setItem(SEATS_KEY + '.probe', '1');
      localStorage.removeItem(SEATS_KEY + '.probe');
      return true;
    } catch (e) {
      return false;
    }
  }

  // A seat is one seat of one game: a browser may hold both seats of a game (two tabs).
  const sameSeat = (a, b) => a.inbox === b.inbox && a.game === b.game && a.seat === b.seat;

  function rememberSeat(s) {
    const list = loadSeats().filter((x) => !sameSeat(x, s));
    list.push({ inbox: s.inbox, game: s.game, seat: s.seat, token: s.token, pairingCode: s.pairingCode, expiresAt: s.expiresAt });
    storeSeats(list);
  }

  function forgetSeat(s) {
    storeSeats(loadSeats().filter((x) => !sameSeat(x, s)));
  }

  // Forgetting a seat loses its token for good: say what that means first. A host's
  // game that nobody joined yet is cancelled with it, so it stops counting as open.
  // Whether anyone joined is asked of the hub: the code this browser kept says nothing
  // of a guest who joined while its page was closed.
  async function onForget(x) {
    let waitingHost = false;
    if (x.seat === 'X') {
      try {
        waitingHost = (await api('GET', gamePath(x.inbox, x.game))).phase === 'waiting';
      } catch (e) {
        waitingHost = false;
      }
    }
    const question = waitingHost
      ? 'Forget game ' + x.game + '? Nobody has joined it yet: it will be cancelled.'
      : 'Forget your seat ' + x.seat + ' in game ' + x.game + '? This browser will no longer be able to play or resign it, and the game stays open until it ends.';
    if (!window.confirm(question)) return;
    if (waitingHost) {
      try {
        await api('DELETE', gamePath(x.inbox, x.game), undefined, x.token);
      } catch (e) {
        // Gone already (another tab cancelled it): forgotten all the same. Joined since
        // the question, or not cancelled for another reason: the seat is kept, and why.
        if (e.status !== 401 && e.status !== 404) {
          if (e.code === 'already_paired') showAlert('Game ' + x.game + ' was joined just now, so it was not cancelled; your seat is kept.');
          else showAlert('Could not cancel game ' + x.game + ', so your seat is kept: ', why(e), '.');
          return;
        }
      }
    }
    forgetSeat(x);
    ($('mine').hidden ? $('create-protocol') : $('mine-title')).focus();
  }

  // The pairing code another tab asked for (a fresh one) replaces the one this tab shows.
  function adoptKeptCode() {
    const s = S.session;
    if (!s || s.mode !== 'seat') return;
    const kept = loadSeats().find((x) => sameSeat(x, s));
    if (!kept || (kept.pairingCode === s.pairingCode && kept.expiresAt === s.expiresAt)) return;
    s.pairingCode = kept.pairingCode;
    s.expiresAt = kept.expiresAt;
    saveSession();
    render();
  }

  function renderSeats() {
    const list = $('mine-list');
    const seats = loadSeats();
    $('mine').hidden = seats.length === 0;
    list.textContent = '';
    for (const x of seats.slice().reverse()) {
      const li = el('li');
      li.appendChild(el('span', { class: 'game-id' }, x.game));
      li.appendChild(el('span', { class: 'game-info' }, ' seat ' + x.seat + ', inbox ' + x.inbox + ' '));
      const where = el('span', { class: 'seat-state', 'data-game': x.game, 'data-seat': x.seat });
      li.appendChild(where);
      if (!$('lobby').hidden) showSeatState(x, where);
      const resume = el('button', { type: 'button', 'aria-label': 'Resume game ' + x.game + ' as ' + x.seat, 'data-resume': x.game, 'data-seat': x.seat }, 'Resume');
      resume.addEventListener('click', () => enterGame({ mode: 'seat', inbox: x.inbox, game: x.game, seat: x.seat, token: x.token, pairingCode: x.pairingCode, expiresAt: x.expiresAt }));
      const forget = el('button', { type: 'button', class: 'danger', 'aria-label': 'Forget seat ' + x.seat + ' of game ' + x.game }, 'Forget');
      forget.addEventListener('click', () => onForget(x));
      li.appendChild(resume);
      li.appendChild(forget);
      list.appendChild(li);
    }
  }

  // Where a kept seat's game stands, from its public state, so the list says which games
  // wait for this player and which are over (a game can end while its page is closed).
  async function showSeatState(x, where) {
    let text;
    try {
      const state = await api('GET', gamePath(x.inbox, x.game));
      text = seatState(state, x);
    } catch (e) {
      text = e.status === 404 ? 'no longer on the hub' : '';
    }
    if (text) where.textContent = '(' + text + ') ';
  }

  function seatState(state, x) {
    const seat = x.seat;
    const name = String(state.protocol || '').split(':').pop();
    const r = state.result;
    let where;
    // A host whose code expired must ask for a new one (or forget the game, which
    // cancels it): until then the game counts as open, and nobody can join it.
    const expired = x.expiresAt && Date.parse(x.expiresAt) <= Date.now() + S.skew;
    if (state.phase === 'waiting' && seat === 'X' && expired) where = 'the code expired';
    else if (state.phase === 'waiting') where = seat === 'X' ? 'waiting for a guest' : 'waiting for the host';
    else if (state.phase === 'paired') where = 'waiting for the start';
    else if (r && r.status !== 'in_progress') where = 'over: ' + resultText(r, seat);
    else if (state.view && state.view.toMove) where = state.view.toMove === seat ? 'your turn' : 'waiting for ' + state.view.toMove;
    else where = 'in progress';
    return name ? name + ', ' + where : where;
  }

  // Runs `work` with `button` disabled, so that a second click does nothing meanwhile, and
  // gives the focus back to the button when disabling it took the focus away.
  async function whileBusy(button, work) {
    if (button.disabled) return;
    const focused = document.activeElement === button;
    button.disabled = true;
    try {
      await work();
    } finally {
      button.disabled = false;
      const lost = document.activeElement === null || document.activeElement === document.body;
      if (focused && lost && button.offsetParent !== null) button.focus();
    }
  }

  // What is wrong with an inbox name, in words, or null: the hub's rule, checked here so
  // that a name such as ".." is not first taken apart by the browser as part of a path.
  function inboxProblem(inbox) {
    if (/^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$/.test(inbox)) return null;
    return 'an inbox name is 1 to 128 letters, digits and . _ : - and starts with a letter or digit';
  }

  function gamePath(inbox, game) {
    return '/v1/inboxes/' + encodeURIComponent(inbox) + '/games' + (game === undefined ? '' : '/' + encodeURIComponent(game));
  }

  // The Idempotency-Key this page pairs each code with. A pair whose answer was lost (the
  // hub unreachable mid-request) is sent again with the same key when Join is pressed
  // again, and the hub seats this page at O once more rather than answer that the code
  // is used.
  const pairKeys = new Map();
  function pairKey(code) {
    if (!pairKeys.has(code)) {
      const bytes = crypto.getRandomValues(new Uint8Array(16));
      pairKeys.set(code, Array.from(bytes, (b) => b.toString(16).padStart(2, '0')).join(''));
    }
    return pairKeys.get(code);
  }

  // The create this page last sent without an answer, and its Idempotency-Key. The same
  // create (the same inbox and form) sent again, as Create pressed again after "the hub
  // cannot be reached" sends it, goes with the same key, and the hub answers with the game
  // the first try made instead of making a second. Any answer but the hub's failure ends
  // it.
  let unanswered = null;
  function createKey(request) {
    if (!unanswered || unanswered.request !== request) {
      const bytes = crypto.getRandomValues(new Uint8Array(16));
      unanswered = { request, key: Array.from(bytes, (b) => b.toString(16).padStart(2, '0')).join('') };
    }
    return unanswered.key;
  }

  async function api(method, path, body, token, extraHeaders) {
    const headers = Object.assign({}, extraHeaders);
    if (body !== undefined) headers['Content-Type'] = 'application/json';
    if (token) headers.Authorization = 'Bearer ' + token;
    let res;
    try {
      res = await fetch(path, {
        method,
        headers,
        body: body === undefined ? undefined : JSON.stringify(body),
        cache: 'no-store',
      });
    } catch (e) {
      const err = new Error('the hub cannot be reached');
      err.reason = { words: err.message };
      throw err;
    }
    const date = Date.parse(res.headers.get('Date') || '');
    // Whole seconds: only a difference of more than one tells anything.
    if (!Number.isNaN(date)) S.skew = Math.abs(date - Date.now()) > 1500 ? date - Date.now() : 0;
    let data = null;
    try {
      data = await res.json();
    } catch (e) {
      data = null;
    }
    if (!res.ok) {
      const r = data && data.error ? reason(data.error, data.detail) : { words: 'the hub answered HTTP ' + res.status };
      const wait = res.headers.get('Retry-After');
      if (res.status === 429 && wait && !r.words.includes('retry after')) r.words = r.words.replace(/; wait a moment$/, '') + '; retry after ' + wait + ' s';
      const err = new Error(r.words);
      err.reason = r;
      err.status = res.status;
      err.code = data && data.error;
      throw err;
    }
    return data;
  }

  // ---------- protocols and the create form ----------

  function kindOf(ref) {
    const name = String(ref || '').split(':').pop();
    if (name === 'tic-tac-toe') return 'cells';
    if (name === 'connect-four') return 'columns';
    if (name === 'rock-paper-scissors') return 'choices';
    return 'text';
  }

  async function loadProtocols() {
    const select = $('create-protocol');
    try {
      const data = await api('GET', '/v1/protocols');
      const items = (data && Array.isArray(data.items) && data.items) || [];
      S.protocols = items
        .map((p) => ({ ref: p.ref, spec: p.spec || {}, id: p.protocolId, isDefault: p.default === true }))
        .filter((p) => typeof p.ref === 'string');
    } catch (e) {
      showAlert('Could not load the list of games: ', why(e), '.');
      return;
    }
    select.textContent = '';
    for (const p of S.protocols) {
      const title = typeof p.spec.name === 'string' ? p.spec.name : p.ref;
      select.appendChild(el('option', { value: p.ref, selected: p.isDefault }, title));
    }
    renderRuleInputs();
  }

  function renderRuleInputs() {
    const box = $('create-rules');
    box.querySelectorAll('.rule').forEach((n) => n.remove());
    const p = S.protocols.find((x) => x.ref === $('create-protocol').value);
    const params = p && p.spec.parameters && typeof p.spec.parameters === 'object' ? p.spec.parameters : {};
    const order = Object.keys(RULE_LABELS);
    const rank = (name) => (order.includes(name) ? order.indexOf(name) : order.length);
    const names = Object.keys(params).sort((a, b) => rank(a) - rank(b));
    box.hidden = names.length === 0;
    for (const name of names) {
      const param = params[name] || {};
      const id = 'rule-' + name.replace(/[^A-Za-z0-9_-]/g, '_');
      const row = el('div', { class: 'rule' });
      let range = param.min !== undefined && param.max !== undefined ? ' (' + param.min + '–' + param.max + ')' : '';
      // A line can be no longer than the board's longer side.
      if (name === 'winLength' && params.rows && params.cols) range = ' (1 to the longer side)';
      // A best-of is odd, so that a game cannot end level.
      if (name === 'bestOf' && range) range = ' (odd, ' + range.slice(2);
      row.appendChild(el('label', { htmlFor: id }, ruleLabel(name) + range));
      let input;
      if (param.type === 'boolean') {
        input = el('input', { id, type: 'checkbox', checked: param.default === true });
      } else if (param.type === 'enum' && Array.isArray(param.values || param.enum)) {
        input = el('select', { id });
        for (const v of param.values || param.enum) input.appendChild(el('option', { value: String(v) }, String(v)));
        if (param.default !== undefined) input.value = String(param.default);
      } else {
        input = el('input', { id, type: 'number', step: '1', inputMode: 'numeric' });
        if (param.min !== undefined) input.min = String(param.min);
        if (param.max !== undefined) input.max = String(param.max);
        if (param.default !== undefined) input.value = String(param.default);
      }
      input.dataset.rule = name;
      input.dataset.type = param.type || 'integer';
      row.appendChild(input);
      box.appendChild(row);
    }
  }

  // The rules the form asks for, or throws with what is wrong with one, in words.
  function readRules() {
    const rules = {};
    for (const input of $('create-rules').querySelectorAll('[data-rule]')) {
      const name = input.dataset.rule;
      if (input.dataset.type === 'boolean') rules[name] = input.checked;
      else if (input.dataset.type === 'enum') rules[name] = input.value;
      else if (input.value.trim() !== '') {
        const n = Number(input.value);
        const low = input.min === '' ? -Infinity : Number(input.min);
        const high = input.max === '' ? Infinity : Number(input.max);
        if (!Number.isInteger(n) || n < low || n > high) {
          throw new Error('“' + ruleLabel(name) + '” must be a whole number' + (input.min !== '' && input.max !== '' ? ' from ' + input.min + ' to ' + input.max : ''));
        }
        rules[name] = n;
      }
    }
    if (rules.bestOf !== undefined && rules.bestOf % 2 === 0) {
      throw new Error('“' + ruleLabel('bestOf') + '” must be an odd number, so that a game cannot end level');
    }
    if (rules.winLength !== undefined && rules.rows !== undefined && rules.cols !== undefined && rules.winLength > Math.max(rules.rows, rules.cols)) {
      throw new Error('“' + ruleLabel('winLength') + '” can be at most the board\'s longer side (' + Math.max(rules.rows, rules.cols) + ')');
    }
    return rules;
  }

  async function onCreate(event) {
    event.preventDefault();
    showAlert('');
    const inbox = $('create-inbox').value.trim();
    const protocol = $('create-protocol').value;
    if (!inbox || !protocol) {
      showAlert('Choose a game and an inbox.');
      return;
    }
    if (inboxProblem(inbox)) {
      showAlert('Check the inbox: ' + inboxProblem(inbox) + '.');
      return;
    }
    let rules;
    try {
      rules = readRules();
    } catch (e) {
      showAlert('Check the rules: ' + e.message + '.');
      return;
    }
    await whileBusy($('create-button'), async () => {
      try {
        const body = { protocol, rules, signed: $('create-signed').checked };
        const request = JSON.stringify([inbox, body]);
        let c;
        try {
          c = await api('POST', gamePath(inbox), body, undefined, { 'Idempotency-Key': createKey(request) });
        } catch (e) {
          if (e.status !== undefined && e.status < 500) unanswered = null;
          throw e;
        }
        unanswered = null;
        enterGame({
          mode: 'seat',
          inbox: c.inbox,
          game: c.game,
          seat: c.seat,
          token: c.token,
          pairingCode: c.pairingCode,
          expiresAt: c.expiresAt,
        });
        log('You created the game and sit as ' + c.seat + '.');
      } catch (e) {
        showAlert('Could not create the game: ', why(e), '.');
      }
    });
  }

  async function onJoin(event) {
    event.preventDefault();
    showAlert('');
    const code = $('join-code').value.replace(/[\s-]/g, '').toUpperCase();
    if (!code) {
      showAlert('Type the pairing code you were given.');
      return;
    }
    await whileBusy($('join-button'), async () => {
      try {
        const p = await api('POST', '/v1/pair', { code }, undefined, { 'Idempotency-Key': pairKey(code) });
        enterGame({ mode: 'seat', inbox: p.inbox, game: p.game, seat: p.seat, token: p.token });
        log('You joined the game and sit as ' + p.seat + '.');
      } catch (e) {
        showAlert('Could not join: ', e.code === 'not_found' ? 'no game has this code' : why(e), '.');
      }
    });
  }

  async function onList(event) {
    event.preventDefault();
    const inbox = $('list-inbox').value.trim();
    if (!inbox) return;
    if (inboxProblem(inbox)) {
      showAlert('Check the inbox: ' + inboxProblem(inbox) + '.');
      return;
    }
    await listPage(inbox, null);
  }

  // One page of an inbox's games, newest first, added to the list (the first page replaces
  // it); "More games" asks for the next one while the hub says there is one. Only the
  // answer to the latest request is shown: two clicks in a row listed each game twice.
  async function listPage(inbox, after) {
    showAlert('');
    const list = $('game-list');
    const asked = ++S.listAsked;
    try {
      const query = '?limit=' + LIST_PAGE + (after ? '&after=' + encodeURIComponent(after) : '');
      const data = await api('GET', gamePath(inbox) + query);
      if (asked !== S.listAsked) return;
      if (!after) list.textContent = '';
      const items = (data && data.items) || [];
      S.listInbox = inbox;
      S.listNext = data && typeof data.next === 'string' ? data.next : null;
      const hadFocus = document.activeElement === $('list-more');
      $('list-more').hidden = !S.listNext;
      // The list itself is not a live region (a screen reader read out every game and its
      // Watch button): one line says how many came.
      const count = items.length === 1 ? '1 game' : items.length + ' games';
      let said = after ? count.replace(/ game/, ' more game') + ' listed' : items.length ? count + ' listed' : 'No games in this inbox yet';
      if (S.listNext) said += '; More games lists the next ones';
      setText($('list-said'), said + '.');
      for (const g of items) {
        const li = el('li');
        const status = g.result && g.result.status && g.result.status !== 'in_progress' ? resultText(g.result, null) : g.phase;
        li.appendChild(el('span', { class: 'game-id' }, g.game));
        li.appendChild(el('span', { class: 'game-info' }, ' ' + String(g.protocol || '').split(':').pop() + ', ' + status + ' '));
        const watch = el('button', { type: 'button', 'aria-label': 'Watch game ' + g.game, 'data-game': g.game }, 'Watch');
        watch.addEventListener('click', () => enterGame({ mode: 'watch', inbox, game: g.game }));
        li.appendChild(watch);
        list.appendChild(li);
      }
      // The last page hid the button that had the focus: give it to the last game listed.
      if (hadFocus && !S.listNext) {
        const last = list.querySelector('li:last-child button');
        if (last) last.focus();
      }
    } catch (e) {
      if (asked === S.listAsked) showAlert('Could not list games: ', why(e), '.');
    }
  }

  function onWatchId() {
    const inbox = $('list-inbox').value.trim();
    const game = $('watch-id').value.trim();
    if (!inbox || !game) {
      showAlert('Type the inbox and the id of the game to watch.');
      return;
    }
    if (inboxProblem(inbox)) {
      showAlert('Check the inbox: ' + inboxProblem(inbox) + '.');
      return;
    }
    showAlert('');
    enterGame({ mode: 'watch', inbox, game });
  }

  // ---------- entering and leaving a game ----------

  // Forgets everything the game view showed, so nothing of one game lingers into the next.
  function resetGameView() {
    S.truth = null;
    S.pending = null;
    S.myChoice = null;
    S.news = '';
    S.retry = 0;
    S.lost = false;
    S.keepNotice = false;
    S.boardKey = '';
    for (const id of ['board', 'log', 'pairing-code', 'pairing-link', 'pairing-expires', 'copy-said', 'status', 'game-title', 'game-meta']) {
      $(id).textContent = '';
    }
    $('pairing').hidden = true;
    showNotice('');
    clearTimeout(S.expiryTimer);
    document.body.dataset.phase = '';
    document.body.dataset.over = '';
    document.body.dataset.frames = '0';
    document.title = TITLE;
  }

  function enterGame(session) {
    resetGameView();
    S.session = session;
    // An invitation this tab was opened with is dealt with: a reload shows this game.
    $('join-invite').hidden = true;
    $('join-button').removeAttribute('aria-describedby');
    if (new URLSearchParams(location.search).has('code')) history.replaceState(null, '', location.pathname);
    // A code this tab kept may have been replaced from another tab meanwhile.
    if (session.mode === 'seat') {
      const kept = loadSeats().find((x) => sameSeat(x, session));
      if (kept) {
        session.pairingCode = kept.pairingCode;
        session.expiresAt = kept.expiresAt;
      }
    }
    saveSession();
    if (session.mode === 'seat') rememberSeat(session);
    $('leave-hint').hidden = session.mode !== 'seat';
    setText($('leave-hint'), canKeepSeats()
      ? 'Your seat stays under “Your games” in the lobby; leaving does not end the game.'
      : 'This browser does not let the page keep seats (its storage is off): going back to the lobby or closing the tab loses this seat.');
    $('lobby').hidden = true;
    $('game').hidden = false;
    render();
    connect();
    $('game-title').focus();
  }

  // An invitation link (`/?code=…`) opens the lobby with Join first, its code filled in and
  // the focus on Join, also in a tab that showed a game: resuming that game put the code
  // into the hidden form and said nothing. The tab's game is not lost: a seat stays under
  // "Your games" (Resume), and a watched game's id is filled in under "Watch a game".
  function offerInvitation(code, saved) {
    $('lobby').insertBefore($('join-form'), $('create-form'));
    $('join-code').value = code;
    let text = 'You opened an invitation to a game: press Join to take its free seat.';
    if (saved) {
      S.session = null;
      saveSession();
      if (saved.mode === 'seat') {
        text += ' The game this tab showed, ' + saved.game + ', stays under “Your games”.';
      } else {
        $('list-inbox').value = saved.inbox;
        $('watch-id').value = saved.game;
        text += ' The game this tab showed, ' + saved.game + ', is filled in under “Watch a game”.';
      }
    }
    setText($('join-invite'), text);
    $('join-invite').hidden = false;
    $('join-button').setAttribute('aria-describedby', 'join-invite');
    $('join-button').focus();
  }

  // Back to the lobby. A seat whose game goes on stays under "Your games"; one whose game
  // is over is forgotten.
  function leaveGame() {
    const s = S.session;
    if (s && s.mode === 'seat' && over()) forgetSeat(s);
    disconnect();
    S.session = null;
    resetGameView();
    saveSession();
    $('game').hidden = true;
    $('lobby').hidden = false;
    setConn('offline');
    renderSeats();
    const first = $('mine').hidden ? $('create-protocol') : $('mine-title');
    first.focus();
  }

  async function onNewCode() {
    const s = S.session;
    if (!s || s.mode !== 'seat') return;
    await whileBusy($('new-code'), async () => {
      try {
        const c = await api('POST', gamePath(s.inbox, s.game) + '/code', undefined, s.token);
        s.pairingCode = c.pairingCode;
        s.expiresAt = c.expiresAt;
        saveSession();
        rememberSeat(s);
        log('A fresh pairing code replaces the old one.');
        render();
      } catch (e) {
        if (e.status === 401) return seatGone(s);
        showAlert('Could not get a new code: ', why(e), '.');
      }
    });
  }

  // One cancel at a time: a double click's second one found the game gone, and its
  // failure replaced the news that the game was cancelled.
  async function onCancel() {
    const s = S.session;
    if (!s || s.mode !== 'seat') return;
    await whileBusy($('cancel-game'), async () => {
      try {
        await api('DELETE', gamePath(s.inbox, s.game), undefined, s.token);
        forgetSeat(s);
        leaveGame();
        showAlert('The game was cancelled.');
      } catch (e) {
        if (e.status === 401) return seatGone(s);
        showAlert('Could not cancel: ', why(e), '.');
      }
    });
  }

  // The hub no longer knows this seat's token: its game was cancelled (from another tab,
  // say) or is gone. Nothing more can be done with it here.
  function seatGone(s) {
    forgetSeat(s);
    leaveGame();
    showAlert('This seat no longer opens its game: it was cancelled, perhaps from another tab.');
  }

  // Said beside the button (a polite status), since the log may be off screen.
  async function onCopy() {
    const code = $('pairing-code').textContent;
    const said = $('copy-said');
    let words;
    try {
      await navigator.clipboard.writeText(code);
      words = 'Copied.';
    } catch (e) {
      const range = document.createRange();
      range.selectNodeContents($('pairing-code'));
      const sel = window.getSelection();
      sel.removeAllRanges();
      sel.addRange(range);
      words = 'Selected: copy it by hand.';
    }
    setText(said, words);
    log(words === 'Copied.' ? 'The code was copied.' : 'Select and copy the code by hand.');
    clearTimeout(S.copyTimer);
    S.copyTimer = setTimeout(() => setText(said, ''), COPY_SAID_MS);
  }

  // ---------- the WebSocket relay ----------

  function disconnect() {
    clearTimeout(S.retryTimer);
    const ws = S.ws;
    S.ws = null;
    if (ws) ws.close(1000);
  }

  function connect() {
    disconnect();
    if (!S.session) return;
    const scheme = location.protocol === 'https:' ? 'wss://' : 'ws://';
    let ws;
    try {
      ws = new WebSocket(scheme + location.host + '/v1/ws');
    } catch (e) {
      scheduleReconnect();
      return;
    }
    S.ws = ws;
    setConn('connecting');
    ws.onopen = () => {
      if (S.ws !== ws) return;
      setConn('connected');
      const hello = { t: 'hello' };
      if (S.session.mode === 'seat') hello.token = S.session.token;
      ws.send(JSON.stringify(hello));
    };
    ws.onmessage = (e) => {
      if (S.ws !== ws) return;
      let msg;
      try {
        msg = JSON.parse(e.data);
      } catch (err) {
        return;
      }
      // A count of this game's frames, for people and tests diagnosing a stuck box.
      document.body.dataset.frames = String(Number(document.body.dataset.frames || 0) + 1);
      if (msg && typeof msg === 'object') onMessage(msg);
    };
    ws.onclose = () => {
      if (S.ws !== ws) return;
      S.ws = null;
      if (!S.lost && S.retry === 0) log('The connection to the hub was lost; reconnecting.');
      S.lost = true;
      // An unanswered move may or may not have reached the hub; the state after the
      // reconnect says which, so the early drawing is dropped now.
      S.pending = null;
      S.news = '';
      scheduleReconnect();
    };
  }

  // Backoff doubles from 500 ms to RETRY_MAX_MS, each wait drawn between half of it and
  // all of it, so that the pages of a hub that restarted come back spread out, not at once.
  function scheduleReconnect() {
    if (!S.session) return;
    const ceiling = Math.min(RETRY_MAX_MS, 500 * 2 ** S.retry);
    const delay = ceiling / 2 + Math.random() * (ceiling / 2);
    S.retry += 1;
    setConn('reconnecting');
    S.retryTimer = setTimeout(connect, delay);
    render();
  }

  // The browser is back online, or its tab is shown again (a phone may have slept through
  // its retries): try now, not at the end of a backoff that may have grown to 10 s.
  function reconnectNow() {
    if (S.session && !S.ws) connect();
  }

  function send(msg) {
    if (!S.ws || S.ws.readyState !== WebSocket.OPEN) return false;
    S.ws.send(JSON.stringify(msg));
    return true;
  }

  function newRef() {
    S.refCounter += 1;
    return 'm' + Date.now().toString(36) + '-' + S.refCounter;
  }

  function onMessage(msg) {
    const s = S.session;
    if (!s) return;
    switch (msg.t) {
      case 'hello.ok':
        // Only a greeting resets the back-off: a hub that accepts the socket and then
        // closes it at once must not be hammered.
        S.retry = 0;
        if (S.lost) log('Connected to the hub again.');
        S.lost = false;
        showNotice('');
        if (s.mode === 'watch') send({ t: 'game.subscribe', inbox: s.inbox, game: s.game });
        break;
      case 'game.state':
        if (msg.inbox !== s.inbox || msg.game !== s.game) return;
        onState(msg);
        break;
      case 'game.refused':
        if (S.pending && msg.ref === S.pending.ref) {
          S.pending = null;
          log('The hub refused your move: ' + describe(msg.error, msg.detail) + '. It was taken back.');
          showNotice('Your move was refused: ', reason(msg.error, msg.detail), '.');
          render();
        } else {
          log('The hub refused a request: ' + describe(msg.error, msg.detail) + '.');
          showNotice('Refused: ', reason(msg.error, msg.detail), '.');
        }
        // The true state comes right after a refusal: it is the board the refusal speaks
        // of (a move that lost the race to another window's has a new seq), so it leaves
        // the notice to be read.
        S.keepNotice = true;
        break;
      case 'error':
        onError(msg);
        break;
      default:
        break;
    }
  }

  // What a refusal means, as {words, code}: the words for people, the hub's code and
  // detail for diagnosis. A code the page has no words for is told by its name, with its
  // detail, since nothing else would say it; a wait the hub asks for is always in the words.
  function reason(error, detail) {
    const code = String(error || 'refused');
    const more = detail ? String(detail) : '';
    // A pair refused for the failed tries before it is not "too many actions at once".
    const pairing = code === 'rate_limited' && /pairing/.test(more);
    const known = pairing ? 'too many tries with codes that did not work, from here' : REASONS[more] || REASONS[code];
    if (!known) return { words: code.replace(/_/g, ' ') + (more ? ': ' + more : ''), code };
    const wait = /retry after \d+ s/.exec(more);
    let words = known;
    if (wait) words += '; ' + wait[0];
    else if (code === 'rate_limited') words += '; wait a moment';
    return { words, code: code + (more ? ': ' + more : '') };
  }

  function describe(error, detail) {
    const r = reason(error, detail);
    return r.words + ' (' + r.code + ')';
  }

  // What went wrong with a request, as a reason to show.
  function why(e) {
    return e.reason || { words: e.message };
  }

  function onError(msg) {
    const s = S.session;
    if (S.pending && msg.ref === S.pending.ref) {
      S.pending = null;
      render();
    }
    if (msg.error === 'unauthorized' && s.mode === 'seat') {
      forgetSeat(s);
      leaveGame();
      showAlert('This seat no longer opens its game (' + String(msg.error) + (msg.detail ? ': ' + String(msg.detail) : '') + ').');
      return;
    }
    // A game to watch that the hub does not know: back to the lobby, saying so.
    if (msg.error === 'not_found' && s.mode === 'watch' && !S.truth) {
      leaveGame();
      // The hub's words when there is more to say (a game stored but not refereed).
      const more = msg.detail && msg.detail !== 'no such game' ? ': ' + String(msg.detail) : '';
      showAlert('There is no game ' + s.game + ' to watch in inbox ' + s.inbox + more + '.');
      return;
    }
    // The game shown is gone: its host cancelled it (from another tab, say), and the hub
    // said so on this socket, which watches nothing from then on.
    if (msg.error === 'not_found' && (s.mode === 'watch' || s.mode === 'seat')) {
      if (s.mode === 'seat') forgetSeat(s);
      leaveGame();
      showAlert('Game ' + s.game + ' is gone: ' + String(msg.detail || 'the hub no longer knows it') + '.');
      return;
    }
    const r = reason(msg.error, msg.detail);
    showNotice({ words: capital(r.words), code: r.code }, '.');
  }

  function onState(state) {
    const before = S.truth;
    if (S.pending && state.ref === S.pending.ref) {
      const choice = S.pending.move && S.pending.move.choice;
      if (choice && state.view) S.myChoice = { round: state.view.round, choice };
      S.pending = null;
    }
    S.truth = state;
    // A refusal speaks of the board it was made on: the seat's own next move, any new
    // event and the game's end all make it old news.
    if (S.keepNotice) S.keepNotice = false;
    else if (state.ref || !before || state.seq !== before.seq || (state.result && state.result.status !== 'in_progress')) showNotice('');
    if (state.phase !== 'waiting' && S.session.pairingCode) {
      delete S.session.pairingCode;
      delete S.session.expiresAt;
      saveSession();
      if (S.session.mode === 'seat') rememberSeat(S.session);
    }
    if (state.notice === 'held_choice_lost') {
      // The choice the page remembered is gone with the hub's.
      S.myChoice = null;
      if (!(before && before.notice === state.notice)) log('Your choice was lost in a hub restart; choose again.');
    }
    narrate(before, state);
    render();
  }

  // ---------- telling what happened ----------

  // Every line goes to the log. The news among them (what this page did not do itself: a
  // guest joining, the other side's moves, a round's choices) is also told by the status
  // line, before where the game stands, so that a screen reader hears each event once, in
  // one place; what the status says anyway (the start, the end) is the log's alone.
  function narrate(before, after) {
    S.news = '';
    if (!before) {
      log('Connected: ' + phaseText(after) + '.');
      return;
    }
    const news = [];
    const tell = (line, spoken) => {
      log(line);
      if (spoken) news.push(line);
    };
    if (before.phase === 'waiting' && after.phase !== 'waiting') tell(mySeat() === 'X' ? 'Your opponent joined.' : 'O joined.', true);
    if (before.phase !== 'started' && after.phase === 'started') log('The game started.');
    const v = after.view;
    if (v && after.seq !== before.seq && after.seq !== null) {
      const kind = kindOf(after.protocol);
      if ((kind === 'cells' || kind === 'columns') && v.lastMove && Array.isArray(v.cells)) {
        const row = v.cells[v.lastMove.row];
        const who = row ? row[v.lastMove.col] : null;
        if (who && (!before.view || before.view.moves !== v.moves)) {
          const missed = missedMoves(kind, before.view, v);
          if (missed) tell(missed, true);
          // A state that answers this page's own move carries its ref: that move is no news.
          if (kind === 'cells') tell(who + ' played row ' + (v.lastMove.row + 1) + ', column ' + (v.lastMove.col + 1) + '.', !after.ref);
          else tell(who + ' dropped a piece in column ' + (v.lastMove.col + 1) + '.', !after.ref);
        }
      }
      if (kind === 'choices' && Array.isArray(v.history)) {
        const seen = before.view && Array.isArray(before.view.history) ? before.view.history.length : 0;
        for (let i = seen; i < v.history.length; i += 1) {
          const r = v.history[i];
          const won = r.winner ? r.winner + ' takes the round' : 'a tie, replayed';
          tell('Round ' + (i + 1) + ': X ' + r.X + ', O ' + r.O + ' — ' + won + '.', true);
        }
      }
    }
    const wasOver = before.result && before.result.status !== 'in_progress';
    if (after.result && after.result.status !== 'in_progress' && !wasOver) {
      log('Game over: ' + resultText(after.result, mySeat()) + '.');
    }
    S.news = news.join(' ');
  }

  // Moves made while this page was not connected (or not watching: a seat played from
  // another tab or by its agent) come as one new board. The order of all but the last is
  // not on it, so they are told by player, in board order; the last move is told after.
  function missedMoves(kind, was, now) {
    if (!was || !Array.isArray(was.cells) || typeof was.moves !== 'number' || typeof now.moves !== 'number') return '';
    const count = now.moves - was.moves - 1;
    if (count < 1) return '';
    const placed = { X: [], O: [] };
    now.cells.forEach((row, r) => {
      if (!Array.isArray(row)) return;
      row.forEach((mark, c) => {
        const last = now.lastMove && now.lastMove.row === r && now.lastMove.col === c;
        const empty = !(was.cells[r] && was.cells[r][c]);
        if (!last && empty && placed[mark]) placed[mark].push(kind === 'cells' ? 'row ' + (r + 1) + ', column ' + (c + 1) : 'column ' + (c + 1));
      });
    });
    const told = ['X', 'O']
      .filter((who) => placed[who].length > 0)
      .map((who) => {
        const verb = kind === 'cells' ? ' played ' : placed[who].length === 1 ? ' dropped a piece in ' : ' dropped pieces in ';
        return who + verb + placed[who].join(' and ');
      });
    if (told.length === 0) return '';
    const moves = count === 1 ? '1 move' : count + ' moves';
    return 'While this page was away, ' + moves + ' came before the last: ' + told.join('; ') + '.';
  }

  function mySeat() {
    return S.session && S.session.mode === 'seat' ? S.session.seat : null;
  }

  function resultText(result, seat) {
    if (!result) return 'not started';
    if (result.status === 'draw') return 'a draw';
    if (result.status !== 'win') return 'in progress';
    const how = result.by === 'resign' ? (result.winner === 'X' ? 'O resigned' : 'X resigned') : 'by ' + (result.by || 'win');
    if (seat) return (result.winner === seat ? 'you won' : 'you lost') + ' (' + result.winner + ' wins, ' + how + ')';
    return result.winner + ' wins, ' + how;
  }

  function over() {
    const r = S.truth && S.truth.result;
    return Boolean(r && r.status !== 'in_progress');
  }

  // Whether this seat's pairing code has expired, by the hub's clock as far as the page
  // can tell (its answers' Date header), not only by this computer's.
  function codeExpired() {
    const s = S.session;
    const expires = s && s.expiresAt ? Date.parse(s.expiresAt) : NaN;
    return expires <= Date.now() + S.skew;
  }

  function online() {
    return Boolean(S.ws && S.ws.readyState === WebSocket.OPEN);
  }

  function phaseText(state) {
    const seat = mySeat();
    if (!online() && !over()) return 'connection lost; reconnecting to the hub';
    if (state.phase === 'waiting') {
      if (seat === 'X' && codeExpired()) return 'the code expired; ask for a new one to invite someone';
      return seat === 'X' ? 'waiting for your opponent to join with the code' : 'waiting for the second player';
    }
    if (state.phase === 'paired') return 'both seats are filled; waiting for the start';
    if (over()) return 'game over: ' + resultText(state.result, seat);
    const v = state.view || {};
    const kind = kindOf(state.protocol);
    if (kind === 'choices') {
      if (v.phase === 'reveal') return 'both chose; the choices are being revealed';
      if (!seat) return 'round ' + v.round + ': the players are choosing';
      if (S.pending) return 'sending your choice';
      if (v.committed && v.committed[seat]) return 'your choice is sealed; waiting for your opponent';
      if (state.notice === 'held_choice_lost') return 'your choice was lost in a hub restart; choose again';
      if (myPendingChoice(v)) return 'you chose ' + myPendingChoice(v) + '; it stays secret and counts when your turn comes (you may still change it)';
      return 'round ' + v.round + ': choose rock, paper or scissors';
    }
    if (!v.toMove) return 'in progress';
    if (!seat) return v.toMove + ' to move';
    if (S.pending) return 'sending your move';
    return v.toMove === seat ? 'your turn' : 'waiting for ' + v.toMove;
  }

  // ---------- drawing ----------

  function canMove() {
    const t = S.truth;
    if (!t || !S.session || S.session.mode !== 'seat' || t.phase !== 'started' || over() || S.pending) return false;
    if (!S.ws || S.ws.readyState !== WebSocket.OPEN || !t.view) return false;
    if (kindOf(t.protocol) === 'choices') return t.view.phase === 'commit' && !(t.view.committed && t.view.committed[mySeat()]);
    return t.view.toMove === mySeat();
  }

  function play(move) {
    if (!canMove()) {
      // A square pressed while the opponent is to move sends nothing: say why.
      const t = S.truth;
      if (t && t.view && t.phase === 'started' && !over() && !S.pending && S.session.mode === 'seat') {
        showNotice(kindOf(t.protocol) === 'choices' ? 'Your choice for this round is made; wait for the reveal.' : 'It is not your turn yet.');
      }
      return;
    }
    showNotice('');
    S.news = '';
    const ref = newRef();
    S.pending = { ref, move };
    render();
    if (!send({ t: 'game.move', move, ref })) {
      S.pending = null;
      render();
      return;
    }
    // The relay always answers a move; should an answer go astray, the box asks for the
    // board rather than keep an early drawing (and a locked board) forever.
    setTimeout(() => {
      if (S.pending && S.pending.ref === ref) {
        S.pending = null;
        log('No answer to your move yet; showing the hub\'s board.');
        send({ t: 'game.board' });
        render();
      }
    }, PENDING_MAX_MS);
  }

  function render() {
    const s = S.session;
    const t = S.truth;
    if (!s) return;
    // The pairing box goes when the guest joins, the actions when the game ends: focus on
    // a control in one of them then moves to the status line, where the news is told,
    // rather than falling to the page itself.
    const focusIn = ['pairing', 'actions'].filter((id) => !$(id).hidden && $(id).contains(document.activeElement));
    const board = $('board');
    setText($('game-title'), 'Game ' + s.game);
    const who = s.mode === 'seat' ? 'You play ' + s.seat : 'You are watching';
    const proto = t && t.protocol ? String(t.protocol).split(':').pop() : '…';
    setText($('game-meta'), who + ' · ' + proto + ' · inbox ' + s.inbox + (t && t.signed ? ' · signed' : ''));

    const waiting = Boolean(s.mode === 'seat' && s.seat === 'X' && s.pairingCode && (!t || t.phase === 'waiting'));
    $('pairing').hidden = !waiting;
    if (waiting) {
      const expires = s.expiresAt ? Date.parse(s.expiresAt) : NaN;
      const expired = codeExpired();
      $('pairing-live').hidden = expired;
      $('pairing-expired').hidden = !expired;
      setText($('pairing-code'), s.pairingCode);
      const link = location.origin + '/?code=' + encodeURIComponent(s.pairingCode);
      setText($('pairing-link'), link);
      $('pairing-link').href = link;
      const at = Number.isNaN(expires) ? 'a few minutes' : new Date(expires).toLocaleTimeString();
      setText($('pairing-expires'), at);
      setText($('pairing-expired'), 'The code ' + s.pairingCode + ' expired at ' + at + '. Ask for a new code to invite someone.');
      clearTimeout(S.expiryTimer);
      if (!expired && !Number.isNaN(expires)) S.expiryTimer = setTimeout(render, Math.min(expires - Date.now() - S.skew + 250, 2147483000));
    }

    // Before the first state: "Connecting…", or, once a try failed, that the hub cannot be
    // reached (a watched game's page has nothing else to say so).
    let status = S.retry > 0 ? 'The hub cannot be reached; the page keeps trying.' : 'Connecting…';
    if (t) status = (S.news ? S.news + ' ' : '') + capital(phaseText(t)) + '.';
    setText($('status'), status);
    document.body.dataset.phase = t ? t.phase : '';
    document.body.dataset.over = over() ? 'true' : 'false';

    const started = Boolean(t && t.phase === 'started' && t.view);
    $('actions').hidden = !(s.mode === 'seat' && started && !over());
    if ($('actions').hidden) {
      $('resign-confirm').hidden = true;
      $('resign').hidden = false;
    }
    if (focusIn.some((id) => $(id).hidden)) $('status').focus();

    if (!started) {
      // The pairing box already tells a waiting host what to do.
      drawText(t && !waiting ? t.board : '');
    } else {
      const kind = kindOf(t.protocol);
      if (kind === 'cells' || kind === 'columns') drawGrid(kind, t.view);
      else if (kind === 'choices') drawChoices(t.view);
      else drawText(t.board);
    }
    board.dataset.seq = t && t.seq !== null && t.seq !== undefined ? String(t.seq) : '';
    board.dataset.pending = S.pending ? 'true' : 'false';
    const keys = $('board-keys');
    if (keys) keys.hidden = over();
    showWide();
    let title = TITLE;
    if (over()) title = 'Game over · ' + TITLE;
    else if (t && t.phase === 'started' && s.mode === 'seat' && t.view && t.view.toMove === mySeat()) title = 'Your turn · ' + TITLE;
    if (document.title !== title) document.title = title;
    // The chain says nothing before the start.
    $('chain').hidden = !started;

    setText($('chain-result'), t ? (t.phase === 'started' ? capital(resultText(t.result, mySeat())) : capital(t.phase)) : '—');
    setText($('chain-seq'), t && t.seq !== null && t.seq !== undefined ? 'seq ' + t.seq : '—');
    setText($('chain-head'), t && t.head ? t.head : '—');
    const link = $('export-link');
    link.hidden = !started;
    link.href = gamePath(s.inbox, s.game) + '/export';
    link.setAttribute('download', s.game + '.jsonl');
    $('check-chain').hidden = !started;
    // A check speaks of the board it was made on: a new move or another game clears it.
    if (S.checked && (S.checked.game !== s.game || !t || S.checked.seq !== t.seq)) {
      S.checked = null;
      setText($('chain-check'), '');
      delete $('chain-check').dataset.ok;
    }
  }

  // ---------- checking the chain in this browser ----------

  // RFC 8785 (JCS) for what events hold: objects, arrays, strings, integers, booleans.
  // Keys sort by UTF-16 code units, as JavaScript sorts strings, and JSON.stringify writes
  // strings and integers as RFC 8785 does (it is defined by them).
  function canonical(v) {
    if (Array.isArray(v)) return '[' + v.map(canonical).join(',') + ']';
    if (v && typeof v === 'object') {
      return '{' + Object.keys(v).sort().map((k) => JSON.stringify(k) + ':' + canonical(v[k])).join(',') + '}';
    }
    return JSON.stringify(v);
  }

  function toHex(buffer) {
    return Array.from(new Uint8Array(buffer), (b) => b.toString(16).padStart(2, '0')).join('');
  }

  function fromHex(text) {
    const out = new Uint8Array(text.length / 2);
    for (let i = 0; i < out.length; i++) out[i] = parseInt(text.substr(2 * i, 2), 16);
    return out;
  }

  // The game's exported log, checked link by link with the browser's own SHA-256: each
  // event's seq and prevHash and, in a signed game, its Ed25519 signature under its
  // seat's key from the start. The rules are not checked here (the hub referees them;
  // `pipehub verify` checks everything). Returns every event's hash, whether the game is
  // signed and whether this browser could check signatures, or throws with what is wrong.
  async function checkChain(inbox, game) {
    if (!window.crypto || !crypto.subtle) {
      throw new Error('this page is not in a secure context (HTTPS or localhost), so the browser offers no SHA-256');
    }
    const res = await fetch(gamePath(inbox, game) + '/export', { cache: 'no-store' });
    if (!res.ok) throw new Error('the hub answered HTTP ' + res.status);
    const lines = (await res.text()).split('\n').filter((line) => line.trim() !== '');
    const hashes = [];
    let keys = null;
    let noEd25519 = false;
    for (let i = 0; i < lines.length; i++) {
      let e;
      try {
        e = JSON.parse(lines[i]);
      } catch (err) {
        throw new Error('line ' + (i + 1) + ' of the log is not JSON');
      }
      if (e.seq !== i) throw new Error('line ' + (i + 1) + ' of the log has seq ' + e.seq + ', not ' + i);
      if (e.prevHash !== (i === 0 ? '' : hashes[i - 1])) {
        throw new Error('seq ' + i + ' does not link to the event before it');
      }
      const sig = e.sig;
      delete e.sig;
      const bytes = new TextEncoder().encode(canonical(e));
      hashes.push(toHex(await crypto.subtle.digest('SHA-256', bytes)));
      if (i === 0 && e.rules && e.rules.keys) keys = e.rules.keys;
      if (!keys || noEd25519) continue;
      if (typeof sig !== 'string' || typeof keys[e.player] !== 'string') throw new Error('seq ' + i + ' is not signed');
      let key;
      try {
        key = await crypto.subtle.importKey('raw', fromHex(keys[e.player]), { name: 'Ed25519' }, false, ['verify']);
      } catch (err) {
        if (err && err.name === 'NotSupportedError') {
          noEd25519 = true;
          continue;
        }
        throw new Error('the start carries a key this browser cannot read');
      }
      if (!(await crypto.subtle.verify({ name: 'Ed25519' }, key, fromHex(sig), bytes))) {
        throw new Error('seq ' + i + ' has a bad signature');
      }
    }
    return { hashes, keys, noEd25519 };
  }

  async function onCheckChain() {
    const s = S.session;
    const t = S.truth;
    if (!s || !t || t.seq === null || t.seq === undefined) return;
    const out = $('chain-check');
    const checked = { game: s.game, seq: t.seq };
    S.checked = checked;
    delete out.dataset.ok;
    setText(out, 'Checking…');
    let text;
    let ok = false;
    try {
      const got = await checkChain(s.inbox, s.game);
      if (got.hashes[t.seq] !== t.head) {
        throw new Error('the head the hub shows for seq ' + t.seq + ' is not the hash of its log');
      }
      // The signatures are checked against the keys the log's start names: those must be
      // the keys the game's state has shown all along, or a rewritten log could bring its own.
      const shown = t.keys || {};
      if (t.signed && (!got.keys || got.keys.X !== shown.X || got.keys.O !== shown.O)) {
        throw new Error('the keys in the log are not the keys of this game');
      }
      got.signed = Boolean(got.keys);
      text = 'Checked in this browser: ' + (t.seq + 1) + (t.seq === 0 ? ' event links' : ' events link') + ' up to the head';
      // A seat's key proves who signed only where its player holds it: a seat taken in
      // this page sends no key of its own, so the hub holds it and signs with it.
      if (got.signed && got.noEd25519) text += ' (this browser cannot check Ed25519 signatures)';
      else if (got.signed && s.mode === 'seat') text += ', each signed with its seat\'s key (the hub holds your seat\'s key and signs with it for you)';
      else if (got.signed) text += ', each signed with its seat\'s key';
      text += '.';
      ok = true;
    } catch (e) {
      text = 'The check failed: ' + e.message + '.';
    }
    if (S.checked !== checked) return; // another game, or another check, since
    setText(out, text);
    out.dataset.ok = ok ? 'true' : 'false';
  }

  function capital(text) {
    return text ? text.charAt(0).toUpperCase() + text.slice(1) : text;
  }

  function drawText(text) {
    const board = $('board');
    if (S.boardKey !== 'text') {
      S.boardKey = 'text';
      board.textContent = '';
      board.appendChild(el('pre', { class: 'text-board' }));
    }
    const pre = board.querySelector('pre');
    setText(pre, text || '');
    pre.hidden = !text;
  }

  // A board too wide for the screen scrolls sideways, which nothing else would show on a
  // phone (its scrollbar is hidden until touched): a line above it says so.
  function showWide() {
    const board = $('board');
    $('board-wide').hidden = board.scrollWidth <= board.clientWidth + 1;
  }

  // The grid is built once per shape and then updated in place, so a keyboard user's focus
  // stays on the button they pressed.
  function drawGrid(kind, v) {
    const board = $('board');
    const rows = v.rows;
    const cols = v.cols;
    // Only a seat gets buttons: a spectator's keyboard should not wade through the board.
    const seated = Boolean(mySeat());
    const key = kind + ':' + rows + 'x' + cols + (seated ? ':seat' : ':watch');
    if (S.boardKey !== key) {
      S.boardKey = key;
      board.textContent = '';
      board.style.setProperty('--cols', String(cols));
      if (kind === 'columns' && seated) {
        const drops = el('div', { class: 'drops', role: 'group', 'aria-label': 'Drop a piece', 'aria-describedby': 'board-keys' });
        for (let c = 0; c < cols; c += 1) {
          const b = el('button', { type: 'button', class: 'drop', 'data-col': String(c) }, '↓');
          b.addEventListener('click', () => play({ col: c }));
          drops.appendChild(b);
        }
        rove(drops, cols);
        board.appendChild(drops);
      }
      const grid = el('div', { class: 'grid ' + kind, role: 'group', 'aria-label': 'Board' });
      for (let r = 0; r < rows; r += 1) {
        for (let c = 0; c < cols; c += 1) {
          let cell;
          if (kind === 'cells' && seated) {
            cell = el('button', { type: 'button', class: 'cell' });
            cell.addEventListener('click', () => play({ row: r, col: c }));
          } else {
            cell = el('span', { class: 'cell', role: 'img' });
          }
          cell.dataset.row = String(r);
          cell.dataset.col = String(c);
          grid.appendChild(cell);
        }
      }
      if (kind === 'cells' && seated) {
        grid.setAttribute('aria-describedby', 'board-keys');
        rove(grid, cols);
      }
      board.appendChild(grid);
      if (seated) board.appendChild(el('p', { id: 'board-keys', class: 'hint' }, kind === 'cells' ? 'Arrow keys move between the squares; Enter or Space plays.' : 'Arrow keys move between the columns; Enter or Space drops a piece.'));
    }

    const movable = canMove();
    const onLine = new Set((v.line || []).map((p) => p.row + ':' + p.col));
    const last = v.lastMove ? v.lastMove.row + ':' + v.lastMove.col : '';
    let early = '';
    if (S.pending) {
      const m = S.pending.move;
      if (kind === 'cells') early = m.row + ':' + m.col;
      else early = lowestEmpty(v, m.col) + ':' + m.col;
    }
    for (const cell of board.querySelectorAll('.grid .cell')) {
      const r = Number(cell.dataset.row);
      const c = Number(cell.dataset.col);
      const at = r + ':' + c;
      const row = v.cells[r] || [];
      let mark = row[c] || '';
      const isEarly = at === early;
      if (isEarly) mark = mySeat();
      setText(cell, mark);
      const cls = 'cell' + (mark ? ' mark-' + mark : '') + (isEarly ? ' pending' : '') + (onLine.has(at) ? ' win' : '') + (at === last && !isEarly ? ' last' : '');
      if (cell.className !== cls) cell.className = cls;
      setAttr(cell, 'aria-label', 'Row ' + (r + 1) + ', column ' + (c + 1) + ': ' + (mark || 'empty') + (isEarly ? ' (sending)' : '') + (onLine.has(at) ? ', winning line' : ''));
      if (cell.tagName === 'BUTTON') setAttr(cell, 'aria-disabled', movable ? 'false' : 'true');
    }
    for (const b of board.querySelectorAll('.drop')) {
      const c = Number(b.dataset.col);
      setAttr(b, 'aria-label', 'Drop a piece in column ' + (c + 1));
      setAttr(b, 'aria-disabled', movable ? 'false' : 'true');
      b.classList.toggle('pending', Boolean(S.pending && S.pending.move.col === c));
    }
  }

  // One tab stop for a group of buttons laid out in rows of `cols` (a roving tabindex): the
  // arrow keys move between them, Home and End to the ends of the row (with Ctrl, of the
  // group), and Enter or Space presses the button as ever. Every square a tab stop put 400
  // of them between the status line and Resign on a 20 by 20 board.
  function rove(group, cols) {
    const buttons = Array.from(group.querySelectorAll('button'));
    buttons.forEach((b, i) => { b.tabIndex = i === 0 ? 0 : -1; });
    // The tab stop is where the focus was last, whether it came by key, click or script.
    group.addEventListener('focusin', (e) => {
      const i = buttons.indexOf(e.target);
      if (i < 0 || e.target.tabIndex === 0) return;
      for (const b of buttons) if (b.tabIndex === 0) b.tabIndex = -1;
      e.target.tabIndex = 0;
    });
    group.addEventListener('keydown', (e) => {
      const i = buttons.indexOf(document.activeElement);
      if (i < 0 || e.altKey || e.metaKey) return;
      const start = i - (i % cols);
      const end = Math.min(buttons.length, start + cols) - 1;
      let to;
      if (e.key === 'ArrowLeft') to = i > start ? i - 1 : i;
      else if (e.key === 'ArrowRight') to = i < end ? i + 1 : i;
      else if (e.key === 'ArrowUp') to = i >= cols ? i - cols : i;
      else if (e.key === 'ArrowDown') to = i + cols < buttons.length ? i + cols : i;
      else if (e.key === 'Home') to = e.ctrlKey ? 0 : start;
      else if (e.key === 'End') to = e.ctrlKey ? buttons.length - 1 : end;
      else return;
      e.preventDefault();
      buttons[to].focus();
    });
  }

  function lowestEmpty(v, col) {
    for (let r = v.rows - 1; r >= 0; r -= 1) {
      if (v.cells[r] && !v.cells[r][col]) return r;
    }
    return -1;
  }

  // The hub's view of this seat carries the choice it keeps for the seat (`pendingChoice`),
  // so it survives a reload; the page's own memory of the round covers the moment between.
  function myPendingChoice(v) {
    if (over()) return null;
    if (typeof v.pendingChoice === 'string') return v.pendingChoice;
    return S.myChoice && S.myChoice.round === v.round ? S.myChoice.choice : null;
  }

  function drawChoices(v) {
    const board = $('board');
    if (S.boardKey !== 'choices') {
      S.boardKey = 'choices';
      board.textContent = '';
      board.appendChild(el('p', { class: 'score' }));
      const group = el('div', { class: 'choices', role: 'group', 'aria-label': 'Your choice' });
      for (const choice of CHOICES) {
        const b = el('button', { type: 'button', class: 'choice', 'data-choice': choice }, choice);
        b.addEventListener('click', () => play({ choice }));
        group.appendChild(b);
      }
      board.appendChild(group);
      board.appendChild(el('p', { class: 'mine' }));
      board.appendChild(el('ol', { class: 'rounds', 'aria-label': 'Rounds played' }));
    }
    const scores = v.scores || {};
    const score = 'X ' + (scores.X || 0) + ' – ' + (scores.O || 0) + ' O';
    setText(board.querySelector('.score'), over() ? 'Final score · ' + score : 'Round ' + v.round + ' · first to ' + v.target + ' · ' + score);
    const movable = canMove();
    board.querySelector('.choices').hidden = !mySeat() || over();
    const early = S.pending ? S.pending.move.choice : null;
    const mine = early || myPendingChoice(v);
    for (const b of board.querySelectorAll('.choice')) {
      setAttr(b, 'aria-disabled', movable ? 'false' : 'true');
      setAttr(b, 'aria-pressed', mine === b.dataset.choice ? 'true' : 'false');
      b.classList.toggle('pending', early === b.dataset.choice);
    }
    const seat = mySeat();
    let text = '';
    // Who has chosen speaks of a round under way: once the game is over, there is none.
    if (over()) {
      text = '';
    } else if (seat) {
      if (early) text = 'Your choice: ' + early + ' (sending…)';
      else if (mine) text = 'Your choice this round: ' + mine;
      const other = seat === 'X' ? 'O' : 'X';
      if (v.committed && v.committed[other] && v.phase === 'commit') text += (text ? ' · ' : '') + other + ' has chosen';
    } else if (v.committed) {
      text = 'Chosen: X ' + (v.committed.X ? 'yes' : 'no') + ', O ' + (v.committed.O ? 'yes' : 'no');
    }
    setText(board.querySelector('.mine'), text);
    const rounds = board.querySelector('.rounds');
    const history = Array.isArray(v.history) ? v.history : [];
    if (rounds.children.length !== history.length) {
      rounds.textContent = '';
      history.forEach((r) => {
        rounds.appendChild(el('li', null, 'X ' + r.X + ', O ' + r.O + ' — ' + (r.winner ? r.winner + ' wins' : 'tie')));
      });
    }
  }

  // ---------- resign ----------

  function onResign() {
    $('resign').hidden = true;
    $('resign-confirm').hidden = false;
    $('resign-no').focus();
  }

  function onResignAnswer(yes) {
    $('resign-confirm').hidden = true;
    $('resign').hidden = false;
    if (yes && S.session && S.session.mode === 'seat' && !over()) {
      if (!send({ t: 'game.resign', ref: newRef() })) showNotice('Not connected; try again in a moment.');
      // The resign button goes with the game: keep the focus where the result is told.
      $('status').focus();
      return;
    }
    $('resign').focus();
  }

  // ---------- start ----------

  function start() {
    $('create-form').addEventListener('submit', onCreate);
    $('join-form').addEventListener('submit', onJoin);
    $('list-form').addEventListener('submit', onList);
    $('create-protocol').addEventListener('change', renderRuleInputs);
    $('copy-code').addEventListener('click', onCopy);
    $('new-code').addEventListener('click', onNewCode);
    $('cancel-game').addEventListener('click', onCancel);
    $('resign').addEventListener('click', onResign);
    $('resign-yes').addEventListener('click', () => onResignAnswer(true));
    $('resign-no').addEventListener('click', () => onResignAnswer(false));
    $('leave').addEventListener('click', leaveGame);
    $('check-chain').addEventListener('click', onCheckChain);
    $('list-more').addEventListener('click', () => listPage(S.listInbox, S.listNext));
    $('watch-button').addEventListener('click', onWatchId);
    $('watch-id').addEventListener('keydown', (e) => {
      if (e.key === 'Enter') {
        e.preventDefault();
        onWatchId();
      }
    });
    window.addEventListener('online', reconnectNow);
    document.addEventListener('visibilitychange', () => {
      if (document.visibilityState === 'visible') reconnectNow();
    });
    // The board's width changes with the window's (a phone turned sideways, say).
    if (window.ResizeObserver) new ResizeObserver(showWide).observe($('board'));
    $('game-title').tabIndex = -1;
    $('status').tabIndex = -1;
    $('mine-title').tabIndex = -1;
    renderSeats();
    // Another tab took or forgot a seat.
    window.addEventListener('storage', (e) => {
      if (e.key !== SEATS_KEY) return;
      renderSeats();
      adoptKeptCode();
    });

    loadProtocols();
    const saved = loadSession();
    const code = new URLSearchParams(location.search).get('code');
    if (code) offerInvitation(code, saved);
    else if (saved) enterGame(saved);
    document.body.dataset.ready = 'true';
  }

  start();
})();
