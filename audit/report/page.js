// The page's one script (allowed by its hash; nothing else may run). It reads the records
// from the data block and builds the page with createElement and textContent only: no
// record string is ever parsed as HTML, used as a URL, or put into a style.
(function () {
  'use strict';
  var PAGE = 500, TL_PAGE = 1000, AGG_SHOWN = 40;
  var S = { sessions: [], byId: new Map(), rows: [], bySession: new Map(), other: [], agg: new Map(),
    lastSeq: 0, sel: null, shownSessions: PAGE, shownRows: TL_PAGE, open: new Set(), dropped: 0 };

  function el(tag, cls, text) {
    var e = document.createElement(tag);
    if (cls) e.className = cls;
    if (text !== undefined && text !== null) e.textContent = String(text);
    return e;
  }
  function add(parent) {
    for (var i = 1; i < arguments.length; i++) if (arguments[i]) parent.appendChild(arguments[i]);
    return parent;
  }
  function fmtDur(ms) {
    if (!(ms >= 0)) return '';
    if (ms < 1000) return Math.round(ms) + ' ms';
    var s = ms / 1000;
    if (s < 60) return s.toFixed(s < 10 ? 2 : 1) + ' s';
    var m = Math.floor(s / 60);
    if (m < 60) return m + ' min ' + Math.round(s - m * 60) + ' s';
    var h = Math.floor(m / 60);
    return h + ' h ' + (m - h * 60) + ' min';
  }
  function fmtTime(ms) {
    return new Date(ms).toISOString().replace('T', ' ').replace('Z', '');
  }
  function num(n) { return Number(n).toLocaleString('en-US'); }

  // A row is [seq, time ms, session, plugin, event, decision, reason, summary, duration ms,
  // aggregate kind, aggregate key, details, plugin version] (report/rows.go).
  function R(a) {
    return { seq: a[0], t: a[1], session: a[2], plugin: a[3], event: a[4], decision: a[5], reason: a[6],
      summary: a[7], dur: a[8], aggKind: a[9], aggKey: a[10], details: a[11], version: a[12] };
  }

  function addAgg(plugin, kind, key, n) {
    var p = S.agg.get(plugin);
    if (!p) { p = { reached: new Map(), refused: new Map(), path: new Map(), more: { reached: 0, refused: 0, path: 0 } }; S.agg.set(plugin, p); }
    if (!p[kind]) return;
    p[kind].set(key, (p[kind].get(key) || 0) + n);
  }

  function indexRow(r) {
    S.rows.push(r);
    if (r.seq > S.lastSeq) S.lastSeq = r.seq;
    if (r.session) {
      var l = S.bySession.get(r.session);
      if (!l) { l = []; S.bySession.set(r.session, l); }
      l.push(r);
    } else {
      S.other.push(r);
    }
  }

  // A record that arrived live: counted as audit.Sessions counts it.
  function liveRow(r) {
    if (r.seq <= S.lastSeq) return false;
    indexRow(r);
    if (r.session) {
      var s = S.byId.get(r.session);
      if (!s) {
        s = { session: r.session, plugin: r.plugin, version: r.version, start: r.t, end: r.t, ended: false, records: 0, allow: 0, deny: 0, error: 0 };
        S.byId.set(r.session, s); S.sessions.push(s);
      }
      if (!s.plugin && r.plugin) { s.plugin = r.plugin; s.version = r.version; }
      s.end = r.t; s.records++;
      if (r.decision === 'allow' || r.decision === 'deny' || r.decision === 'error') s[r.decision]++;
      if (r.event === 'plugin_exit') s.ended = true;
    }
    if (r.aggKind) addAgg(r.plugin, r.aggKind, r.aggKey, 1);
    return true;
  }

  async function load() {
    var src = document.getElementById('fledge-data').textContent;
    var bin = atob(src.trim());
    var bytes = new Uint8Array(bin.length);
    for (var i = 0; i < bin.length; i++) bytes[i] = bin.charCodeAt(i);
    var stream = new Blob([bytes]).stream().pipeThrough(new DecompressionStream('gzip'));
    return JSON.parse(await new Response(stream).text());
  }

  function stat(cls, n, label) { return add(el('div', 'stat ' + cls), el('b', '', num(n)), el('span', '', label)); }

  function totals() {
    var t = { allow: 0, deny: 0, error: 0 };
    for (var i = 0; i < S.rows.length; i++) { var d = S.rows[i].decision; if (t[d] !== undefined) t[d]++; }
    return t;
  }

  function mix(s) {
    var m = el('div', 'mix'), tot = Math.max(1, s.allow + s.deny + s.error);
    [['a', s.allow], ['d', s.deny], ['e', s.error]].forEach(function (p) {
      if (p[1] > 0) { var i = el('i', p[0]); i.style.width = (100 * p[1] / tot) + '%'; m.appendChild(i); }
    });
    return m;
  }

  function nCell(n, cls) { return el('td', 'n ' + cls + (n === 0 ? ' zero' : ''), num(n)); }

  function renderSessions() {
    var sec = el('section', 'sessions'); sec.id = 'sessions';
    add(sec, el('h2', '', 'Sessions (' + num(S.sessions.length) + ')'));
    if (S.dropped > 0) add(sec, el('p', 'warn', num(S.dropped) + ' more sessions not listed: narrow with --since or --plugin'));
    if (S.sessions.length === 0) { add(sec, el('p', 'none', 'No sessions match.')); return sec; }
    var tb = el('table'), head = el('tr');
    ['Plugin', 'Session', 'Start (UTC)', 'Duration', 'Allow', 'Deny', 'Error', 'Records', ''].forEach(function (h) { head.appendChild(el('th', '', h)); });
    add(tb, add(el('thead'), head));
    var body = el('tbody');
    var n = Math.min(S.sessions.length, S.shownSessions);
    for (var i = 0; i < n; i++) {
      var s = S.sessions[i], tr = el('tr', 'sess' + (s.session === S.sel ? ' sel' : ''));
      tr.dataset.session = s.session;
      var dur = el('td', '', fmtDur(s.end - s.start) + (s.ended ? '' : ' …'));
      if (!s.ended) dur.title = 'no plugin_exit record: still running, or its fledge process died';
      add(tr, el('td', '', s.plugin ? s.plugin + (s.version ? '@' + s.version : '') : '-'), el('td', 'mono', s.session),
        el('td', 'mono', fmtTime(s.start)), dur, nCell(s.allow, 'allow'), nCell(s.deny, 'deny'), nCell(s.error, 'error'),
        el('td', 'n', num(s.records)), add(el('td'), mix(s)));
      tr.addEventListener('click', select.bind(null, s.session));
      body.appendChild(tr);
    }
    add(sec, add(el('div', 'sess-wrap'), add(tb, body)));
    if (S.sessions.length > n) {
      var b = el('button', 'more', 'Show ' + num(Math.min(PAGE, S.sessions.length - n)) + ' more of ' + num(S.sessions.length - n));
      b.addEventListener('click', function () { S.shownSessions += PAGE; render(); });
      sec.appendChild(b);
    }
    return sec;
  }

  function select(id) {
    S.sel = id; S.shownRows = TL_PAGE; S.open.clear();
    render();
    var t = document.getElementById('timeline');
    if (t) t.scrollIntoView({ block: 'start' });
  }

  function legend() {
    var l = el('div', 'legend');
    [['allow', 'var(--allow)'], ['deny (refused)', 'var(--deny)'], ['error', 'var(--error)']].forEach(function (p) {
      var i = el('i'); i.style.background = p[1];
      add(l, add(el('span'), i, document.createTextNode(p[0])));
    });
    add(l, el('span', '', 'bars: how long an exec, tool call, connection or the run took · click a record for its details'));
    return l;
  }

  function recRow(r, start, span) {
    var d = el('div', 'rec ' + r.decision);
    d.dataset.seq = r.seq;
    var sum = el('span', 'sum', r.summary || '');
    if (r.reason && r.reason !== 'ok') add(sum, el('span', 'why', r.reason));
    sum.title = r.summary || '';
    var track = el('div', 'track'), mark = el('i', r.decision + (r.dur > 0 ? '' : ' pt'));
    var from = r.dur > 0 ? r.t - r.dur : r.t;
    mark.style.left = Math.max(0, Math.min(99.5, 100 * (from - start) / span)) + '%';
    if (r.dur > 0) mark.style.width = Math.max(0.3, Math.min(100, 100 * r.dur / span)) + '%';
    mark.title = r.dur > 0 ? fmtDur(r.dur) : fmtTime(r.t);
    track.appendChild(mark);
    add(d, el('span', 'off', '+' + fmtDur(r.t - start)), el('span', 'ev ' + r.decision, r.event), sum, track);
    if (S.open.has(r.seq)) d.appendChild(details(r));
    d.addEventListener('click', function (ev) {
      if (ev.target.classList.contains('det')) return;
      if (S.open.has(r.seq)) { S.open.delete(r.seq); var x = d.querySelector('.det'); if (x) x.remove(); }
      else { S.open.add(r.seq); d.appendChild(details(r)); }
    });
    return d;
  }

  function details(r) {
    var head = { seq: r.seq, time: fmtTime(r.t) + ' UTC', session: r.session, plugin: r.plugin, event: r.event, decision: r.decision, reason: r.reason };
    return el('pre', 'det', JSON.stringify(head, null, 2) + '\n' + JSON.stringify(r.details, null, 2));
  }

  function renderTimeline() {
    var s = S.byId.get(S.sel);
    var rows = S.bySession.get(S.sel) || [];
    var sec = el('section', 'timeline'); sec.id = 'timeline';
    if (!s) { add(sec, el('h2', '', 'Timeline'), el('p', 'none', 'Pick a session above.')); return sec; }
    var start = rows.length ? rows[0].t : s.start, end = rows.length ? rows[rows.length - 1].t : s.end;
    for (var k = 0; k < rows.length; k++) if (rows[k].dur > 0 && rows[k].t - rows[k].dur < start) start = rows[k].t - rows[k].dur;
    var span = Math.max(1, end - start);
    var h = el('div', 'tl-head');
    add(h, el('h2', '', 'Timeline of ' + (s.plugin || '-') + ' · session ' + s.session),
      el('span', 'muted', fmtTime(s.start) + ' UTC · ' + fmtDur(s.end - s.start) + (s.ended ? '' : ' (no plugin_exit yet)') +
        ' · ' + num(s.allow) + ' allow, ' + num(s.deny) + ' deny, ' + num(s.error) + ' error'));
    add(sec, h, legend());
    var tl = el('div', 'tl');
    var n = Math.min(rows.length, S.shownRows);
    for (var i = 0; i < n; i++) tl.appendChild(recRow(rows[i], start, span));
    sec.appendChild(tl);
    if (rows.length > n) {
      var b = el('button', 'more', 'Show ' + num(Math.min(TL_PAGE, rows.length - n)) + ' more of ' + num(rows.length - n) + ' records');
      b.addEventListener('click', function () { S.shownRows += TL_PAGE; render(); });
      sec.appendChild(b);
    }
    return sec;
  }

  function aggList(cls, title, m, more) {
    var box = el('div', cls), list = el('ul', 'dl');
    add(box, el('h3', '', title + ' (' + num(m.size) + ')'));
    var items = Array.from(m.entries()).sort(function (a, b) { return b[1] - a[1] || (a[0] < b[0] ? -1 : 1); });
    if (!items.length) add(box, el('p', 'none', 'none'));
    items.slice(0, AGG_SHOWN).forEach(function (e) { add(list, add(el('li'), el('span', '', e[0]), el('span', '', '× ' + num(e[1])))); });
    box.appendChild(list);
    var rest = items.length - AGG_SHOWN + (more || 0);
    if (rest > 0) add(box, el('p', 'muted', '… and ' + num(rest) + ' more (fledge audit show --plugin … --json has them all)'));
    return box;
  }

  function renderPlugins() {
    var sec = el('section'); sec.id = 'plugins';
    add(sec, el('h2', '', 'Per plugin: where it connected, what it was refused'));
    var names = Array.from(S.agg.keys()).sort();
    if (!names.length) { add(sec, el('p', 'none', 'No network records and no refused paths.')); return sec; }
    var g = el('div', 'plugins');
    names.forEach(function (name) {
      var p = S.agg.get(name), c = el('div', 'card');
      add(c, el('h2', '', name || '-'),
        aggList('reached', 'Destinations reached', p.reached, p.more.reached),
        aggList('refused', 'Destinations refused', p.refused, p.more.refused),
        aggList('path', 'Paths refused', p.path, p.more.path));
      g.appendChild(c);
    });
    return add(sec, g);
  }

  function renderOther() {
    if (!S.other.length) return null;
    var sec = el('section'); sec.id = 'other';
    add(sec, el('h2', '', 'Installs, grants and pins (' + num(S.other.length) + ' records outside sessions)'));
    var tl = el('div', 'tl'), from = Math.max(0, S.other.length - TL_PAGE);
    var start = S.other[from].t, span = Math.max(1, S.other[S.other.length - 1].t - start);
    for (var i = S.other.length - 1; i >= from; i--) tl.appendChild(recRow(S.other[i], start, span));
    if (from > 0) add(sec, el('p', 'muted', 'the newest ' + num(TL_PAGE) + ', newest first'));
    return add(sec, tl);
  }

  function render() {
    var app = document.getElementById('app');
    var t = totals();
    var frag = document.createDocumentFragment();
    add(frag, add(el('div', 'cards'), stat('', S.rows.length, 'records'), stat('', S.sessions.length, 'sessions'),
      stat('allow', t.allow, 'allowed'), stat('deny', t.deny, 'refused'), stat('error', t.error, 'errors')),
    renderSessions(), renderTimeline(), renderPlugins(), renderOther());
    app.replaceChildren(frag);
  }

  var pending = null;
  function later() { if (!pending) pending = setTimeout(function () { pending = null; render(); }, 300); }

  function live(url) {
    var ind = document.getElementById('live');
    var es = new EventSource(url + '?after=' + S.lastSeq);
    es.onopen = function () { ind.className = 'live-on'; ind.textContent = '● live'; };
    es.onerror = function () { ind.className = 'live-off'; ind.textContent = '● reconnecting'; };
    es.onmessage = function (m) {
      var r;
      try { r = R(JSON.parse(m.data)); } catch (e) { return; }
      if (liveRow(r)) {
        if (!S.sel && r.session) S.sel = r.session;
        later();
      }
    };
  }

  load().then(function (d) {
    S.dropped = d.dropped || 0;
    d.sessions.forEach(function (s) {
      s.start = Date.parse(s.start); s.end = Date.parse(s.end);
      S.sessions.push(s); S.byId.set(s.session, s);
    });
    d.rows.forEach(function (a) { indexRow(R(a)); });
    d.aggregates.forEach(function (p) {
      ['reached', 'refused', 'path'].forEach(function (k) {
        var t = p.lists[k];
        if (!t) return;
        Object.keys(t.counts).forEach(function (key) { addAgg(p.plugin, k, key, t.counts[key]); });
        S.agg.get(p.plugin).more[k] = t.more;
      });
    });
    if (d.last_seq > S.lastSeq) S.lastSeq = d.last_seq;
    // The newest session is shown first: it is usually the one to look at.
    if (S.sessions.length) S.sel = S.sessions[S.sessions.length - 1].session;
    render();
    document.body.dataset.ready = '1';
    document.body.dataset.renderMs = String(Math.round(performance.now()));
    var url = document.body.dataset.live;
    if (url) live(url);
  }).catch(function (e) {
    document.getElementById('app').replaceChildren(el('p', 'warn', 'The records could not be read: ' + e));
    document.body.dataset.ready = 'error';
  });
})();
