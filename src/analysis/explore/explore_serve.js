'use strict';
/* explore_serve.js: how the page of `attnlab explore --serve` talks to its
 * server. Only the served page carries this script (in place of the page's
 * @serve@ line); the single file has none, so it cannot load anything. */
window.attnlabServer = {
  /* GET a route of the server (same origin) with the page's token; a
   * Promise of the reply's text, rejected with the status on failure. */
  get: function (route, token) {
    var url = route + (route.indexOf('?') < 0 ? '?' : '&') + 'token=' + encodeURIComponent(token);
    return fetch(url, { cache: 'no-store' }).then(function (r) {
      if (!r.ok) throw new Error('attnlab explore: the server answered ' + r.status + ' to ' + route);
      return r.text();
    });
  }
};
