/*
 * regex.h: the regular expressions of Hugging Face tokenizers' Split
 * pre-tokenizer (the dialect of Oniguruma, which `tokenizers` runs), compiled
 * once when a tokenizer loads and matched over arrays of code points.
 *
 * Data structure: a tok_regex is a program of instructions for a Thompson NFA
 * (consume one character: a literal, a character class, any character; fork
 * with a preferred branch; jump; zero-width assertions; lookahead, whose body
 * follows it and ends with its own MATCH) and the character classes they name
 * (sorted code point ranges, category / property items, an ASCII bitmap),
 * with the set of characters a match may start with from each instruction.
 * Matching reports the match Oniguruma finds first (ordered alternatives,
 * greedy and lazy quantifiers) with a memoised backtracker, and a Pike VM for
 * the searches that reach past the backtracker's window: no pattern is
 * exponential. regex.c says what the dialect covers.
 */
#ifndef AL_TOK_REGEX_H
#define AL_TOK_REGEX_H

#include <stddef.h>
#include <stdint.h>

typedef struct tok_regex tok_regex;
typedef struct tok_regex_ws tok_regex_ws;

/* Compiles pattern[0..len) (UTF-8). literal: the text is matched as it is
 * (Split on a String), not parsed. NULL on failure, with one line in why
 * (out of memory, or what in the pattern is wrong or unsupported, and where). */
tok_regex *tok_regex_compile(const char *pattern, size_t len, int literal, char *why, size_t why_cap);
void tok_regex_free(tok_regex *re);

/* The matching workspace of re (thread lists for each lookahead depth, the
 * backtracker's memory, sized for texts of up to max_len characters, past
 * which the Pike VM takes over; SIZE_MAX: no bound), allocated once per use
 * so that matching never allocates; NULL when out of memory. A workspace
 * serves one thread at a time. */
tok_regex_ws *tok_regex_ws_new(const tok_regex *re, size_t max_len);
void tok_regex_ws_free(tok_regex_ws *ws);

/* The leftmost match of re in cps[0..n) that starts at or after `from`, the
 * one Oniguruma's search returns (assertions see the whole of cps): 1 with
 * [*start, *end), or 0 if there is none. */
int tok_regex_find(const tok_regex *re, tok_regex_ws *ws, const uint32_t *cps, size_t n, size_t from, size_t *start,
                   size_t *end);
/* The same answer from the Pike VM alone (tok_regex_find runs a memoised
 * backtracker first and falls back to the VM for searches that reach far),
 * for tests that compare the two. */
int tok_regex_find_pike(const tok_regex *re, tok_regex_ws *ws, const uint32_t *cps, size_t n, size_t from,
                        size_t *start, size_t *end);

#endif
