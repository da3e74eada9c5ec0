/*
 * explore_page.h: the text of the explorer's page, which lives as real files
 * in src/analysis/explore/ (explore.html, its stylesheet explore.css and its
 * script explore.js). At build time cmake/embed_page.cmake inlines the
 * stylesheet and the script into the HTML and cuts the result at the page's
 * three marker lines, `@weights@`, `@data@` and `@serve@`; explore_html.c
 * writes the pieces with the data in place of those lines:
 *
 *   al_explore_page_head, the weights' lines (base64, one per head),
 *   al_explore_page_after_weights, the data object's JSON and a newline,
 *   al_explore_page_after_data, nothing (the single file) or the server
 *   script al_explore_serve_script (`explore --serve`),
 *   al_explore_page_after_serve.
 *
 * Each piece is NUL-terminated text. The definitions are generated into the
 * build tree (explore_page.c); CMakeLists.txt makes them depend on every file
 * in src/analysis/explore/, so an edit to the page rebuilds them.
 */
#ifndef AL_EXPLORE_PAGE_H
#define AL_EXPLORE_PAGE_H

/* From <!DOCTYPE html> to the opening line of the weights element. */
extern const char al_explore_page_head[];
/* From the end of the weights element to the opening line of the data element. */
extern const char al_explore_page_after_weights[];
/* From the end of the data element to the @serve@ line. */
extern const char al_explore_page_after_data[];
/* From the @serve@ line to the end of the page: the script and the closing tags. */
extern const char al_explore_page_after_serve[];
/* The served page's transport (src/analysis/explore/serve.html and
 * explore_serve.js inlined): a <script> element, for the @serve@ line. */
extern const char al_explore_serve_script_head[];

#endif
