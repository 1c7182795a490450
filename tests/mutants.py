#!/usr/bin/env python3
"""Mutation check: can the suites fail? Not run by CI (20 s to 2 min a mutant).

Each mutant changes one operator of a line of code in src/ (the line's
first of its set's: set 1, the default, comparisons and off-by-ones, <= to
<, == to !=, && to ||, a "+ 1" dropped, ...; set 2 arithmetic, shifts and
masks, + to -, & to |, << to >>, * to /), or with set 3 removes one
statement (an assignment, an increment or a call standing alone on its
line, made `(void)0;`), or with set 4 makes an error success (the first
negative errno of a line made 0), or with set 5 turns a condition round
(the first `!` of a line that is not `!=` dropped), or with set 6 swaps
the first `&&` or `||` of a line (set 1 reaches those only on lines with
no comparison), or with set 7 flips a constant return (`return 0;` and
`return 1;`, `true` and `false`, each made the other), or with set 8
turns an update round (the first `++` or `--`, `+=` or `-=`, `|=` or `&=`
of a line made the other, for loop heads left out), or with set 9 makes
a number one more (the first decimal integer literal of a line, for loop
heads, set 7's returns and branch hints left out), or with set 10 never
takes a branch (the condition of a line's first `if`, where it closes on
that line, made 0), or with set 11 always takes it (the same condition
made 1), or with set 12 turns a choice round (the two arms of a line's
first `?:` swapped), or with set 13 turns a loop's jump round (the first
`break;` of a line made `continue;`, or `continue;` made `break;`), or
with set 14 never runs a loop (the condition of a line's first `while`,
where it closes on that line, made 0), or with set 15 makes a number one
less (the first nonzero decimal integer literal of a line, with set 9's
exceptions), or with set 16 or 17 drops a part of a guard (the first or
the last operand of the `&&` or `||` chain of a line's first `if`), or
with set 18 reverses a comparison (the first `<`, `<=`, `>` or `>=` of a
line made `>`, `>=`, `<` or `<=`), or with set 19 forgets a value (a
one-line declaration's initializer made 0), or with set 20 makes an
alternative a sequel (the first `else` of a line dropped), or with set
21 forgets a result (a `return x;` made `return 0;` where x is not a
constant or an errno), or with set 22 forgets an assigned value (the
right side of an assignment on its own line made 0), or with set 23
swaps a call's first two arguments (those of a line's first call with
two or more), or with set 24 turns a link round (the first `next` or
`prev` member of a line made the other), or with set 25 turns a mask
inside out (the first `~` of a line dropped), or with set 26 loses a
widening (the first `(uint64_t)` or `(int64_t)` cast of a line dropped),
or with set 27 moves a limit in by one (the first `..._MAX` constant of
a line made one less), or with set 28 narrows a value (a declaration
that starts a line with `uint64_t` made `uint32_t`), or with set 29 one
width down (`uint32_t` made `uint16_t`), or with set 30 narrows a size
(`size_t` made `uint16_t`), or with set 31 a signed value (`int` or
`long` made `int16_t`), or with set 32 down to a byte (`uint32_t` or
`uint16_t` made `uint8_t`), or with set 33 a 64-bit value down to 16
bits (`uint64_t` made `uint16_t`), or with set 34 a signed value down
to a byte (`int` or `long` made `int8_t`), or with set 35 a size down
to a byte (`size_t` made `uint8_t`), or with set 36 weakens an atomic
(the first atomic operation of a line made `memory_order_relaxed`: an
explicit acquire, release, acq_rel or seq_cst order, or an implicit
sequentially consistent call made `_explicit` with it), or with set 37
unlocks a critical section (every call that takes and releases one lock
in one function made `(void)0`), or with set 38 narrows a parameter (an
integer parameter of a function's definition, and of its prototype in a
header where it has one, made one width narrower, as sets 28 to 31 do
declarations; set 39 two widths, or to a byte, as sets 32 to 35), or
with set 40 makes an error another (the first negative errno of a line
made -EINVAL, and -EINVAL made -ENOENT), or with set 41 makes a value
signed (a declaration that starts a line with `uint64_t` made
`int64_t`), or with set 42 the same for 32 bits (`uint32_t` made
`int32_t`), or with set 43 turns an order round (two statements that
set 3 would remove, on consecutive lines at one indent, swapped), or
with sets 44 to 46 narrows an atomic (a declaration that starts a line
with `_Atomic`, which sets 28 to 35, 41 and 42 pass over: set 44 one
width down as sets 28 to 31, set 45 to a byte or 16 bits as sets 32 to
35, set 46 signed as sets 41 and 42), in a
git worktree of HEAD, builds it
(sets 36 and 37 with clang and ThreadSanitizer, as CI's stage: on x86 a
weaker order compiles to the same loads and stores, and only TSan's
model of happens-before can see it; a lock missing is a race, which TSan
sees and the other builds mostly do not) and runs every suite
but `install` and `docs`. A mutant that
passes them all is printed as SURVIVED, for a person to judge: many
change nothing a caller could see. One whose object files all hold the
original's code (every section but debugging information compared) is
printed as same-code and not run: it is equivalent for this compiler
and these options (TW_MUTANT_TCE=0 runs it anyway). CI's other builds
(sanitizers, 32 bits) compile it apart, so a same-code mutant might
still differ there; the suites in those builds are not run here.

    python3 tests/mutants.py [COUNT [SEED [START [SET]]]]   # default 69, seed 28, from 0, set 1
    TW_MUTANT_FILES=rest python3 tests/mutants.py ...      # the files the default leaves out
    TW_MUTANT_SETUP=-Dc_args=-U__linux__ python3 tests/mutants.py ...  # other systems' paths
    TW_MUTANT_FILES=headers python3 tests/mutants.py 100 28 0 1,2,3  # several sets, one build
    TW_MUTANT_LINES=src/wheel.c:303,src/timer.c:750 python3 tests/mutants.py 9 28 0 39  # these lines only
    TW_MUTANT_SKIP=big python3 tests/mutants.py ...        # a suite left out too (2 minutes)

Each mutant tried prints one line: its number in the draw, its set (when
SET lists several), the result, file:line:col of the change (the column
counted from 1; then any other lines it changes), the text replaced and
its replacement, the line, and the seconds it took. TW_MUTANT_LINES takes
file:line, or file:line:col for one candidate of a line that has two.

SET may be a comma-separated list: each set's candidates are drawn as a
run of that set alone would draw them, and tried one set after another
in one worktree and one build (COUNT and START count over the whole
list; each line then names its set). Sets 36 and 37 build for
ThreadSanitizer, so they go with each other only.

With one seed the candidates are shuffled the same way each run (while src/
is unchanged), so START continues a run: `69 28 69` tries the next 69.

tests/README.md ("Whether the tests can fail") has what its runs found.
"""
import hashlib, json, os, random, re, subprocess, sys, tempfile, time

def declaration(types):
    """A declaration that starts a line with one of types (a regex
    alternation: a local, or a struct's field; sets 28 to 35, 41 and 42),
    the type its group 1."""
    return re.compile(r'^\s+(?:const\s+)?(' + types + r')\s+\**\s*\w+\s*[=;,\[]')


def atomic_declaration(types):
    """An atomic's declaration (`_Atomic type name`, a local, a struct's
    field or a file's static; sets 44 to 46), the type its group 1. The
    sets before them read `_Atomic` as the type and passed these over."""
    return re.compile(r'^\s*(?:static\s+)?_Atomic\s+(' + types + r')\s+\**\s*\w+\s*[=;,\[]')


# Sets 44 to 46's narrowings, each type's own (a set is one replacement
# a candidate).
ATOMIC_NARROWER = {'uint64_t': 'uint32_t', 'uint32_t': 'uint16_t', 'size_t': 'uint16_t',
                   'int': 'int16_t', 'long': 'int16_t'}
ATOMIC_BYTE = {'uint64_t': 'uint16_t', 'uint32_t': 'uint8_t', 'uint16_t': 'uint8_t',
               'size_t': 'uint8_t', 'int': 'int8_t', 'long': 'int8_t'}
ATOMIC_SIGNED = {'uint64_t': 'int64_t', 'uint32_t': 'int32_t'}


FILES = ['src/wheel.c', 'src/wheel.h', 'src/timer.c', 'src/drain.c', 'src/pool.h', 'src/pool.c',
         'src/extra.c', 'src/delay_queue.c', 'src/tickdiv.h', 'src/watchers.c', 'src/purgatory.c']
# The rest of src/ (the threaded runtime, the allocation hooks, the checker,
# the hash, the locks, the stats) was added later as a draw of its own:
# TW_MUTANT_FILES=rest, or a comma-separated list of files. The default
# stays the list above, so that a seed still draws what it drew before.
REST = ['src/runtime.c', 'src/mem.c', 'src/check.c', 'src/hash.c', 'src/lock.c', 'src/stats.c']
# src/op_states.c (the eighty-second session) had its draw by name:
# TW_MUTANT_FILES=src/op_states.c (tests/README.md).
# The headers with code of their own that neither list names (their inline
# functions are compiled into every file that includes them):
# TW_MUTANT_FILES=headers. lock.h and timer.h had their draws by name
# (tests/README.md); pool.h, wheel.h and tickdiv.h are in FILES.
HEADERS = ['src/lock.h', 'src/timer.h', 'src/delay_queue.h', 'src/extra.h', 'src/mem.h',
           'src/hash.h', 'src/purgatory.h']
# Set 1: comparisons and off-by-ones. Set 2: arithmetic, shifts and masks
# (a sum made a difference, an & an |, a shift turned round, a product a
# quotient), for the size, index and tick computations set 1 leaves alone.
SETS = {
    1: [(' <= ', ' < '), (' >= ', ' > '), (' < ', ' <= '), (' > ', ' >= '), (' == ', ' != '),
        (' != ', ' == '), (' && ', ' || '), (' || ', ' && '), (' + 1', ''), (' - 1', ''),
        ('+ 1u', ''), ('- 1u', '')],
    2: [(' + ', ' - '), (' - ', ' + '), (' & ', ' | '), (' | ', ' & '), (' << ', ' >> '),
        (' >> ', ' << '), (' * ', ' / ')],
    3: None,
    # Sets 4 to 7 each change the first match of a pattern on a line: the
    # pattern, the group changed, and what it becomes.
    # Set 4: an error made success, the first -E... of a line made 0 (a
    # return, an rc set, a ternary's arm, a test).
    4: (re.compile(r'-E[A-Z]+\b'), 0, lambda a: '0'),
    # Set 5: a condition turned round, the first logical not of a line
    # (not a !=) dropped: `!x` as `x`, `!(a && b)` as `(a && b)`.
    5: (re.compile(r'!(?!=)'), 0, lambda a: ''),
    # Set 6: the first && or || of a line, wherever it stands, swapped
    # (set 1 takes a comparison first where a line has one).
    6: (re.compile(r' (?:&&|\|\|) '), 0, lambda a: ' || ' if a == ' && ' else ' && '),
    # Set 7: a constant return flipped, 0 and 1, true and false.
    7: (re.compile(r'\breturn (0|1|true|false)\s*;'), 1,
        lambda a: {'0': '1', '1': '0', 'true': 'false', 'false': 'true'}[a]),
    # Set 8: an update turned round, the first ++ or --, += or -=, |= or &=
    # of a line made the other, except in a for loop's head (a counter run
    # the wrong way only runs the loop off its end: no news).
    8: (re.compile(r'^(?!\s*for\b).*?(\+\+|--|(?<![<>!=+*/%&|^-])[-+|&]=)'), 1,
        lambda a: {'++': '--', '--': '++', '+=': '-=', '-=': '+=', '|=': '&=', '&=': '|='}[a]),
    # Set 9: a number made one more, the first decimal integer literal of a
    # line (0 as 1, 63 as 64; its suffix kept), except in a for loop's head,
    # in set 7's constant returns and in a branch hint (see mask_hints).
    9: (re.compile(r'^(?!\s*(?:for\b|return (?:0|1|true|false)\s*;))'
                   r'.*?(?<![\w.])(\d+)(?:[uU]?[lL]{0,2})(?![\w.])'), 1,
        lambda a: str(int(a) + 1)),
    # Set 10: a branch never taken, the parenthesised condition of a line's
    # first `if` made (0), where it closes on the same line (see
    # if_condition): does some test need each branch's body?
    10: 'if',
    # Set 11: a branch always taken, the same conditions made (1): does some
    # test need each branch skipped when its condition is false?
    11: 'if1',
    # Set 12: a choice turned round, the two arms of a line's first `?:`
    # swapped, where both close on that line (see ternary_arms): does some
    # test tell each value chosen from the other?
    12: 'ternary',
    # Set 13: a loop's jump turned round, the first `break;` of a line made
    # `continue;` and the first `continue;` made `break;` (a `break` of a
    # switch outside any loop does not compile): does some test need the
    # loop left, or gone on with, just there?
    13: (re.compile(r'\b(break|continue);'), 1,
         lambda a: 'continue' if a == 'break' else 'break'),
    # Set 14: a loop never run, the parenthesised condition of a line's
    # first `while` made (0), where it closes on the line (a do-while's
    # body then runs once): does some test need each loop's second turn?
    14: 'while',
    # Set 15: a number made one less, the first decimal integer literal of
    # a line other than 0 (63 as 62, 1 as 0; its suffix kept), with set
    # 9's exceptions: set 9's off-by-ones the other way.
    15: (re.compile(r'^(?!\s*(?:for\b|return (?:0|1|true|false)\s*;))'
                    r'.*?(?<![\w.])([1-9]\d*)(?:[uU]?[lL]{0,2})(?![\w.])'), 1,
         lambda a: str(int(a) - 1)),
    # Set 16: a part of a condition dropped, the first operand of the
    # top-level `&&` or `||` chain of a line's first `if` (where it closes
    # on the line and does not mix the two): is each part of a guard
    # needed? Set 17 drops the last operand instead.
    16: 'first',
    17: 'last',
    # Set 18: a comparison turned round, the first `<`, `<=`, `>` or `>=`
    # of a line (spaced, as the code writes them) made its mirror, `>`,
    # `>=`, `<` or `<=`: set 1 moves a bound by one, this one reverses it.
    18: (re.compile(r'(?<= )(<=|>=|<|>)(?= )'), 1,
         lambda a: {'<': '>', '<=': '>=', '>': '<', '>=': '<='}[a]),
    # Set 19: a value forgotten, the initializer of a declaration standing
    # on one line made 0 (`size_t n = a + b;` as `size_t n = 0;`; a pointer
    # made NULL), where it is not already 0 or NULL or a brace list: does
    # some test need each local's first value? (Set 3 removes assignments
    # but leaves declarations.)
    19: 'init',
    # Set 20: an alternative made a sequel, the first `else` of a line
    # dropped (`} else {` as `} {`, `} else if (c)` as `} if (c)`): the
    # branch that was the alternative then also runs after the first.
    20: (re.compile(r'\belse\b\s*'), 0, lambda a: ''),
    # Set 21: a result forgotten, the value of a line's `return x;` made 0
    # where x is not a constant (set 7 flips those) nor an errno (set 4
    # makes those 0) and closes on the line: a count, a pointer (made
    # NULL), an rc passed on. Does some test read each result?
    21: 'return',
    # Set 22: a value forgotten, the right side of an assignment standing
    # on its own line (`x = a + b;`, `p->next = q;`) made 0, where it is
    # not already 0 or NULL: set 3 keeps the old value, this one writes
    # the wrong new one; set 19 did the same to declarations.
    22: 'assign',
    # Set 23: a call's arguments swapped, the first two arguments of a
    # line's first call with two or more (`memcpy(a, b, n)` as `memcpy(b,
    # a, n)`), where the call closes on the line: most swaps of unlike
    # types do not compile; those that do are the ones to see.
    23: 'swap',
    # Set 24: a link turned round, the first `next` or `prev` member of a
    # line (`->next`, `.prev`) made the other: a list walked or spliced the
    # wrong way. Singly linked structs have no `prev`: those do not compile.
    24: (re.compile(r'(?:->|\.)(next|prev)\b'), 1, lambda a: 'prev' if a == 'next' else 'next'),
    # Set 25: a mask turned inside out, the first bitwise `~` of a line
    # dropped (`x & ~(a - 1)` as `x & (a - 1)`): an alignment, a bit cleared.
    25: (re.compile(r'~(?=[\w(])'), 0, lambda a: ''),
    # Set 26: a widening lost, the first `(uint64_t)` or `(int64_t)` cast of
    # a line dropped: a product or a shift of 32-bit values then wraps, a
    # signed difference turns unsigned. Does some test reach the values
    # where the width matters?
    26: (re.compile(r'\(u?int64_t\)\s*'), 0, lambda a: ''),
    # Set 27: a limit moved in by one, the first `..._MAX` constant of a
    # line (`UINT64_MAX`, `SIZE_MAX`, `INT_MAX`, ...) made one less: the
    # off-by-ones sets 9 and 15 make, at the top of a type, where clamps
    # and "never" markers sit.
    27: (re.compile(r'\b((?:U?INT(?:8|16|32|64)?|SIZE|U?LONG)_MAX)\b'), 1,
         lambda a: '(%s - 1)' % a),
    # Set 28: a value narrowed, a declaration of a line that starts with
    # `uint64_t` (a local, or a struct's field) made `uint32_t`: does some
    # test carry each 64-bit value (a deadline in ns, an id, a count, a
    # size) past 2^32?
    28: (declaration('uint64_t'), 1,
         lambda a: 'uint32_t'),
    # Set 29: set 28 one width down, a declaration that starts a line with
    # `uint32_t` made `uint16_t`: does some test carry each slot, tick,
    # generation, count or mask past 65535? A million pending timers do.
    29: (declaration('uint32_t'), 1,
         lambda a: 'uint16_t'),
    # Set 30: a size narrowed, a declaration that starts a line with
    # `size_t` made `uint16_t` (made `uint32_t` it would need a 4 GiB
    # value to show): does some test size a pool, a mapping or a count of
    # keys past 64 KiB?
    30: (declaration('size_t'), 1,
         lambda a: 'uint16_t'),
    # Set 31: a signed value narrowed, a declaration that starts a line
    # with `int` or `long` made `int16_t`: most hold a return code or a
    # flag, which fit; the counts among them (tasks fired in one call, a
    # list's length) must be carried past 32,767 by some test.
    31: (declaration('int|long'), 1,
         lambda a: 'int16_t'),
    # Set 32: set 29 down to a byte, a declaration that starts a line with
    # `uint32_t` or `uint16_t` made `uint8_t`: the values set 29 found
    # bounded below 65,536 (bucket numbers, worker counts, a queue's
    # length, shifts) must each be carried past 255 by some test.
    32: (declaration('uint32_t|uint16_t'), 1,
         lambda a: 'uint8_t'),
    # Set 33: set 28 down to 16 bits, a declaration that starts a line
    # with `uint64_t` made `uint16_t`: the counts set 28 found no test
    # carries past 2^32 (tw_stats' counters, a pass's tasks fired, the
    # checker's tallies) must each be carried past 65,535 by some test.
    33: (declaration('uint64_t'), 1,
         lambda a: 'uint16_t'),
    # Set 34: set 31 down to a byte, a declaration that starts a line with
    # `int` or `long` made `int8_t`: the return codes and counts set 31
    # found within 16 bits must each fit in -128..127, or some test must
    # carry them past it.
    34: (declaration('int|long'), 1,
         lambda a: 'int8_t'),
    # Set 35: set 30 down to a byte, a declaration that starts a line with
    # `size_t` made `uint8_t`: the sizes and counts set 30 found within 16
    # bits (an entry's size, the page size, the keys of one op) must each
    # fit in a byte, or some test must carry them past 255.
    35: (declaration('size_t'), 1,
         lambda a: 'uint8_t'),
    # Set 36: an atomic weakened, the first atomic operation of a line made
    # relaxed (relaxed_order below). Run under ThreadSanitizer: does some
    # test fail when an acquire or a release that orders a thread's plain
    # data is lost? Counters and flags read under a lock need none, and a
    # store-buffering pair (a store, then a load of another variable, on
    # each side) needs sequential consistency, which TSan does not model.
    36: 'relaxed',
    # Set 37: a critical section unlocked, every call in one function that
    # takes or releases one lock (the same call and argument: `tw__lock(&sh
    # ->lock)` and `tw__unlock(&sh->lock)`) made `(void)0`, so the function
    # runs as before without it (lock_sections below). Run under
    # ThreadSanitizer: does some test run each critical section beside a
    # thread that touches what it guards? Set 3 left these calls alone.
    37: 'unlock',
    # Set 38: a parameter narrowed, an integer parameter of a function's
    # definition (`uint64_t` made `uint32_t`, `uint32_t` made `uint16_t`,
    # `size_t`, `int` and `long` made `uint16_t` or `int16_t`, as sets 28
    # to 31 narrow declarations that start a line; one mutant a parameter,
    # pointers left out), and the same parameter of its prototype where a
    # header declares it (parameters() below). Those sets never reached a
    # parameter: does some test pass each a value past the narrower width?
    # A static function declared before its definition, or whose address
    # is taken for a pointer of its exact type, does not compile so.
    38: 'param',
    # Set 39: set 38 down a step more (`uint64_t` made `uint16_t`,
    # `uint32_t` and `size_t` made `uint8_t`, `int` and `long` made
    # `int8_t`, as sets 32 to 35): the parameters set 38 found bounded
    # (a bucket's number, a shard's, a flag) must each fit, or some test
    # must carry them past it.
    39: 'param8',
    # Set 40: an error made another, the first -E... of a line made -EINVAL
    # (and -EINVAL made -ENOENT). Set 4 made each error success, which a
    # test that only checks `rc < 0` sees; the header promises each code
    # by name: does some test check it exactly?
    40: (re.compile(r'-E[A-Z]+\b'), 0, lambda a: '-ENOENT' if a == '-EINVAL' else '-EINVAL'),
    # Set 41: a value's sign, a declaration that starts a line with
    # `uint64_t` made `int64_t` (set 28's declarations, as wide, signed):
    # a deadline, a tick or a time past 2^63 ns then compares below one
    # before it, and shifts in ones. Does some test carry each such value
    # into the top half of the clock, towards the end of time?
    41: (declaration('uint64_t'), 1,
         lambda a: 'int64_t'),
    # Set 42: set 41 for 32 bits, a declaration that starts a line with
    # `uint32_t` made `int32_t` (set 29's declarations, as wide, signed):
    # a slot, a generation or a link past 2^31 then compares negative,
    # shifts in ones and widens with its sign. Links use the top bit (a
    # list head's carries it, TW__NIL is all ones): does some test see
    # each such value widened or compared as signed?
    42: (declaration('uint32_t'), 1,
         lambda a: 'int32_t'),
    # Set 43: an order turned round, two statements that stand on
    # consecutive lines at one indent (each as set 3 takes them: an
    # assignment, an update or a call written for its effect) swapped:
    # a value read before it is written, a count moved before the check
    # it counts, a link made before its node is filled. Most swaps of
    # unrelated stores change nothing a caller could see (the compiler
    # reorders many of them anyway: same-code); does some test see the
    # order of each pair that matters?
    43: 'order',
    # Sets 44 to 46: an atomic narrowed. Sets 28 to 35, 41 and 42 take a
    # declaration's first word as its type, so `_Atomic uint32_t state`
    # was never narrowed: an op's state word (its count of lists above two
    # flag bits), a reference count, a count of entries watched or
    # pending, a futex word. Set 44 makes each one width narrower
    # (`uint64_t` to `uint32_t`, `uint32_t` to `uint16_t`, `size_t` to
    # `uint16_t`, `int` and `long` to `int16_t`), set 45 two widths or a
    # byte (as sets 32 to 35), set 46 signed (as sets 41 and 42): does some
    # test carry each atomic count past the narrower width?
    44: (atomic_declaration('uint64_t|uint32_t|size_t|int|long'), 1,
         lambda a: ATOMIC_NARROWER[a]),
    45: (atomic_declaration('uint64_t|uint32_t|uint16_t|size_t|int|long'), 1,
         lambda a: ATOMIC_BYTE[a]),
    46: (atomic_declaration('uint64_t|uint32_t'), 1,
         lambda a: ATOMIC_SIGNED[a]),
}
OPS = SETS[1]
# Set 3 removes a statement: what a line holds as a whole that is written
# for its effect (an assignment, ++ or --, a call whose value is dropped).
# Declarations, returns and jumps are left: removing those mostly fails to
# compile or only moves where a function ends. So are the calls that take
# and drop locks: without an unlock a suite hangs until the time limit,
# and without a lock what breaks is a race, which set 37 asks of
# ThreadSanitizer (both calls of a critical section removed together).
STATEMENT = re.compile(r'^(?:[\w.>\[\]*&()-]+\s*(?:[-+*/%&|^]|<<|>>)?=[^=].*'
                       r'|(?:\+\+|--)?[\w.>\[\]-]+(?:\+\+|--)?'
                       r'|[\w.>-]+\(.*\))\s*;$')
DECLARATION = re.compile(r'^(?:\w+\s+)+\**\s*\w+\s*(?:=|;|,|\[)')
KEYWORDS = ('return', 'break', 'continue', 'goto', 'if', 'for', 'while', 'switch', 'do ',
            'else', 'case', 'default', '(void)')


def standalone(c):
    """Whether stripped code c is a statement of its own that set 3
    removes and set 43 moves: written for its effect, not a declaration,
    a jump or a lock's call."""
    return (bool(STATEMENT.match(c)) and not DECLARATION.match(c) and not c.startswith(KEYWORDS)
            and not re.search(r'_(un)?lock\(', c))


def close_paren(code, k):
    """The column of the `)` that closes the `(` at column k, or None
    where the line ends first."""
    depth = 0
    for j in range(k, len(code)):
        depth += {'(': 1, ')': -1}.get(code[j], 0)
        if depth == 0:
            return j
    return None


def mask_hints(code):
    """The line with each __builtin_expect's hint (its last argument) made
    underscores: changing a hint changes no result, only code layout."""
    out, k = code, code.find('__builtin_expect(')
    while k >= 0:
        j = close_paren(code, k + len('__builtin_expect'))
        if j is None:
            break
        c = code.rfind(',', k, j)
        if c > 0:
            out = out[:c + 1] + re.sub(r'\S', '_', out[c + 1:j]) + out[j:]
        k = code.find('__builtin_expect(', j)
    return out


def if_condition(code, keyword='if'):
    """The column and text of the parenthesised condition of the line's
    first `if` (or `while`), or None where there is none or it does not
    close on the line (a condition over several lines is left out)."""
    m = re.search(r'\b' + keyword + r'\s*\(', code)
    j = close_paren(code, m.end() - 1) if m else None
    return None if j is None else (m.end() - 1, code[m.end() - 1:j + 1])


def chain_operands(cond):
    """The top-level operands of a parenthesised condition `(a && b ...)`
    or `(a || b ...)`, as (start, end) columns within it, and the
    operator; None where there is one operand or the two operators mix."""
    depth, ops, cuts = 0, set(), [1]
    j = 1
    while j < len(cond) - 1:
        ch = cond[j]
        if ch in '([':
            depth += 1
        elif ch in ')]':
            depth -= 1
        elif depth == 0 and cond.startswith((' && ', ' || '), j):
            ops.add(cond[j + 1:j + 3])
            cuts += [j, j + 4]
            j += 4
            continue
        j += 1
    cuts.append(len(cond) - 1)
    if len(ops) != 1:
        return None
    return list(zip(cuts[0::2], cuts[1::2])), ops.pop()


def drop_operand(code, last):
    """The column and text of the line's first `if` condition, and the
    same with its first (or last) top-level operand dropped, or None."""
    c = if_condition(code)
    if not c:
        return None
    col, cond = c
    parts = chain_operands(cond)
    if not parts:
        return None
    spans, op = parts
    keep = spans[:-1] if last else spans[1:]
    return col, cond, '(' + (' %s ' % op).join(cond[a:b] for a, b in keep) + ')'


ORDER = re.compile(r'\bmemory_order_(?:acquire|release|acq_rel|seq_cst)\b')
IMPLICIT = re.compile(r'\batomic_(load|store|exchange|fetch_add|fetch_sub|fetch_or|fetch_and'
                      r'|compare_exchange_weak|compare_exchange_strong)\(')


def relaxed_order(code):
    """The column and text of the line's first atomic operation that is not
    relaxed, and the same made relaxed: an explicit order's name, or an
    implicit (sequentially consistent) call made `_explicit`, with both
    orders relaxed for a compare-exchange. None where there is none, or
    the call runs on past the line."""
    m, i = ORDER.search(code), IMPLICIT.search(code)
    if m and (not i or m.start() < i.start()):
        return m.start(), m.group(0), 'memory_order_relaxed'
    j = close_paren(code, i.end() - 1) if i else None
    if j is None:
        return None
    orders = 'memory_order_relaxed' + (', memory_order_relaxed' if 'compare' in i.group(1) else '')
    return (i.start(), code[i.start():j + 1],
            'atomic_%s_explicit(%s, %s)' % (i.group(1), code[i.end():j], orders))


LOCK_CALL = re.compile(r'\b(tw__lock|tw__shard_lock|pthread_mutex_lock)\((.*?)\);')
UNLOCK_OF = {'tw__lock': 'tw__unlock', 'tw__shard_lock': 'tw__shard_unlock',
             'pthread_mutex_lock': 'pthread_mutex_unlock'}


def lock_sections(f, text):
    """Set 37's mutants of one file: for each function (ended by a `}` at
    the left margin) and each lock it takes (a call of LOCK_CALL and its
    argument), the lock's first call made `(void)0`, with every other call
    in the function that takes or releases the same lock (`more`). A lock
    taken in a function that never releases it (a helper that returns
    holding it) goes with the releases in the file's functions that take
    none of their own. A function that waits on a condition variable with
    the lock is left out: a wait needs its mutex held."""
    lines = text.split('\n')
    comments, funcs, cur = comment_lines(text), [], []
    for n, line in enumerate(lines, 1):
        code = line.split('/*')[0].split('//')[0]
        if n not in comments:
            cur.append((n, code))
        if line.startswith('}'):
            funcs.append(cur)
            cur = []

    def calls(body, name, arg):
        pat = re.compile(r'\b%s\(%s\);' % (re.escape(name), re.escape(arg)))
        return [(n, m.start(), m.group(0)) for n, code in body for m in pat.finditer(code)]

    def entry(edits):
        (n, col, a), more = edits[0], edits[1:]
        return {'file': f, 'line': n, 'col': col, 'a': a, 'b': '(void)0;',
                'text': lines[n - 1].strip(),
                'more': [[k, c, x, '(void)0;'] for k, c, x in more]}

    out = []
    for body in funcs:
        seen = []
        for n, code in body:
            for m in LOCK_CALL.finditer(code):
                key = (m.group(1), m.group(2))
                if key in seen:
                    continue
                seen.append(key)
                arg = re.escape(m.group(2))
                if any(re.search(r'pthread_cond_\w*wait\([^,]*,\s*%s\s*[,)]' % arg, c) for _, c in body):
                    continue
                takes = calls(body, key[0], key[1])
                gives = calls(body, UNLOCK_OF[key[0]], key[1])
                if not gives:  # returns holding it: the releases elsewhere
                    gives = [g for other in funcs if not calls(other, key[0], key[1])
                             for g in calls(other, UNLOCK_OF[key[0]], key[1])]
                    if not gives:
                        continue
                out.append(entry(sorted(takes + gives)))
    return out


RETURNED = re.compile(r'^\s*(?:\}\s*)?(?:(?:if|while)\s*\(.*\)\s*)?return\s+(?!-E[A-Z]+\b)'
                      r'(?!(?:0|1|true|false|NULL)\s*;)')
ASSIGNED = re.compile(r'^\s*(?!(?:return|else|case|goto|if|for|while)\b)[\w.>\[\]*()-]+\s*=(?!=)\s*')
DECLARED = re.compile(r'^\s*(?!(?:return|else|case|goto)\b)(?:\w+\s+)+\**\s*\w+\s*=\s*')


def initializer(code, m=False):
    """The column and text of the initializer of the first declarator of a
    one-line declaration (`T x = a, y = b;` gives `a`), or None where the
    line is none, or the value is 0, NULL or a brace list, or it runs on
    past the line. With a match m, the value that starts at m's end
    instead (sets 21 and 22)."""
    m = DECLARED.match(code) if m is False else m
    if not m or not code.rstrip().endswith(';'):
        return None
    depth, k = 0, m.end()
    for j in range(k, len(code)):
        ch = code[j]
        if ch in '([{':
            depth += 1
        elif ch in ')]}':
            depth -= 1
        elif depth == 0 and ch in ',;':
            a = code[k:j].rstrip()
            return None if a in ('', '0', 'NULL') or a.startswith('{') else (k, a)
    return None


CALL = re.compile(r'\b(?!(?:if|while|for|switch|return|sizeof|alignof|_Alignof|defined'
                  r'|__builtin_expect)\b)'
                  r'[A-Za-z_]\w*\s*\(')


def call_arguments(code):
    """The column and text of the first two arguments of the line's first
    call that has two or more and closes on the line (from the first to the
    end of the second), and the same with the two swapped; None where
    there is none, or the two are the same text. A line at the left margin
    (a function's head, or a prototype) has none."""
    if not code[:1].isspace():
        return None
    for m in CALL.finditer(code):
        k = m.end()
        depth, args, start = 0, [], k
        for j in range(k, len(code)):
            ch = code[j]
            if ch in '([{':
                depth += 1
            elif ch in ')]}':
                if depth == 0:
                    args.append((start, j))
                    break
                depth -= 1
            elif ch == ',' and depth == 0:
                args.append((start, j))
                start = j + 1
        else:
            continue  # runs on past the line
        if len(args) < 2:
            continue
        (a0, a1), (b0, b1) = args[0], args[1]
        a, b = code[a0:a1].strip(), code[b0:b1].strip()
        if not a or not b or a == b:
            return None
        col = a0 + (len(code[a0:a1]) - len(code[a0:a1].lstrip()))
        end = b0 + len(code[b0:b1].rstrip())
        text = code[col:end]
        return col, text, b + text[len(a):len(text) - len(b)] + a
    return None


def ternary_arms(code):
    """The column and text of the two arms of the line's first `c ? a : b`
    (from `a` to the end of `b`) and the same with the arms swapped, or None
    where there is none or `b` runs on past the line. `b` ends at a `,`, a
    `;` or an unmatched `)` outside parentheses; a `?:` nested in `a` is
    stepped over, one nested in `b` goes with it."""
    q = code.find(' ? ')
    if q < 0:
        return None
    depth, nest, colon, end = 0, 0, None, None
    for j in range(q + 3, len(code)):
        ch = code[j]
        if ch in '([':
            depth += 1
        elif ch in ')]':
            depth -= 1
            if depth < 0:
                end = j
                break
        elif depth == 0 and code.startswith(' ? ', j):
            nest += 1
        elif depth == 0 and code.startswith(' : ', j) and colon is None:
            if nest:
                nest -= 1
            else:
                colon = j
        elif depth == 0 and ch in ',;' and colon is not None:
            end = j
            break
    if colon is None or end is None:
        return None
    a, b = code[q + 3:colon], code[colon + 3:end].rstrip()
    if not b:
        return None
    return q + 3, code[q + 3:colon + 3 + len(b)], b + ' : ' + a


def heads(text):
    """The heads of the function definitions and prototypes of a file that
    start at the left margin: (name, lines, prototype), where lines are
    (number, code) and prototype says it ends in `;`. A head ends on the
    line where its parentheses close and that ends in `)`, `{` or `;` (an
    attribute's parentheses close before the name); a variable (a head
    with `=`, or no parentheses) is left out."""
    lines, comments, out = text.split('\n'), comment_lines(text), []
    n = 0
    while n < len(lines):
        if not re.match(r'[A-Za-z_]', lines[n]) or (n + 1) in comments or \
                lines[n].startswith(('typedef', 'struct', 'enum', 'union')) and '(' not in lines[n]:
            n += 1
            continue
        head, depth, opened, k = [], 0, False, n
        while k < len(lines):
            code = lines[k].split('/*')[0].split('//')[0]
            head.append((k + 1, code))
            for ch in code:
                depth += {'(': 1, ')': -1}.get(ch, 0)
                opened = opened or ch == '('
            k += 1
            end = code.rstrip()
            if depth == 0 and (end.endswith((';', '}')) or opened and end.endswith((')', '{'))):
                break
        n = k
        flat = [(num, col, ch) for num, code in head for col, ch in enumerate(code)]
        closes = [j for j, (_, _, ch) in enumerate(flat) if ch == ')']
        if not opened or any('=' in c for _, c in head) or not closes:
            continue
        j, depth = closes[-1], 0  # the parameter list: the last group
        while j >= 0:
            depth += {')': 1, '(': -1}.get(flat[j][2], 0)
            if depth == 0:
                break
            j -= 1
        m = re.search(r'(\w+)\s*$', ''.join(ch for _, _, ch in flat[:j]))
        if not m:
            continue
        params, depth, index = {}, 0, 0  # (line, col) of a character: its parameter
        for num, col, ch in flat[j:closes[-1] + 1]:
            depth += {'(': 1, ')': -1}.get(ch, 0)
            if ch == ',' and depth == 1:
                index += 1
            params[(num, col)] = index
        out.append((m.group(1), head, params, head[-1][1].rstrip().endswith(';')))
    return out


PARAM = re.compile(r'(?:(?<=\()|(?<=, )|^\s+)(?:const\s+)?(uint64_t|uint32_t|size_t|int|long)'
                   r'\s+\w+\s*(?=[,)])')
NARROWER = {'uint64_t': 'uint32_t', 'uint32_t': 'uint16_t', 'size_t': 'uint16_t',
            'int': 'int16_t', 'long': 'int16_t'}
NARROWEST = {'uint64_t': 'uint16_t', 'uint32_t': 'uint8_t', 'size_t': 'uint8_t',
             'int': 'int8_t', 'long': 'int8_t'}


def integer_params(head, params):
    """(index, line, col, type) of each integer parameter (not a pointer)
    of a head from heads()."""
    return [(params[(num, m.start(1))], num, m.start(1), m.group(1))
            for num, code in head for m in PARAM.finditer(code) if (num, m.start(1)) in params]


def parameters(top, f, text):
    """Set 38's mutants of one file: each integer parameter (not a
    pointer) of a function's definition, made one width narrower (set
    39's: two widths, or a byte). Where a header under src/ or include/
    declares the function, the same parameter of its prototype is
    narrowed with it (`more`, with its file); a function with no
    prototype must be static."""
    protos = {}
    for d in ('src', 'include'):
        for h in sorted(os.listdir(os.path.join(top, d))):
            if h.endswith('.h'):
                path = os.path.join(d, h)
                for name, head, params, proto in heads(open(os.path.join(top, path)).read()):
                    if proto:
                        protos[name] = (path, integer_params(head, params))
    lines, out = text.split('\n'), []
    narrower = NARROWEST if OPS == 'param8' else NARROWER
    for name, head, params, proto in heads(text):
        if proto:
            continue
        static = head[0][1].startswith('static')
        if not static and name not in protos:
            continue
        for index, num, col, a in integer_params(head, params):
            more = []
            if not static:
                path, decl = protos[name]
                more = [[n, c, t, narrower[t], path] for i, n, c, t in decl if i == index and t == a]
                if not more:
                    continue
            out.append({'file': f, 'line': num, 'col': col, 'a': a, 'b': narrower[a],
                        'text': lines[num - 1].strip(), 'more': more})
    return out


def mutants(top):
    out = []
    for f in FILES:
        if OPS in ('unlock', 'param', 'param8'):
            text = open(os.path.join(top, f)).read()
            out += lock_sections(f, text) if OPS == 'unlock' else parameters(top, f, text)
            continue
        incomment = False
        prev = ''  # the last line of code before this one, stripped
        lines = open(os.path.join(top, f)).read().split('\n')
        for n, line in enumerate(lines, 1):
            st = line.strip()
            if incomment:
                incomment = '*/' not in st
                continue
            if st.startswith('/*'):
                incomment = '*/' not in st
                continue
            if st.startswith(('*', '#', '//')):
                continue
            code = line.split('/*')[0]
            before, prev = prev, code.strip() or prev
            if 'assert' in code or 'FAIL(' in code or '__builtin_prefetch' in code:
                continue
            if OPS in ('if', 'if1', 'while'):
                c = if_condition(code, 'while' if OPS == 'while' else 'if')
                b = '(1)' if OPS == 'if1' else '(0)'
                if c and c[1] != b:
                    out.append({'file': f, 'line': n, 'col': c[0], 'a': c[1], 'b': b,
                                'text': st})
                continue
            if OPS in ('first', 'last'):
                c = drop_operand(code, OPS == 'last')
                if c:
                    out.append({'file': f, 'line': n, 'col': c[0], 'a': c[1], 'b': c[2],
                                'text': st})
                continue
            if OPS in ('init', 'return', 'assign'):
                if OPS == 'init':
                    c = initializer(code)
                elif OPS == 'return':
                    c = initializer(code, RETURNED.match(code))
                else:
                    c = not DECLARED.match(code) and initializer(code, ASSIGNED.match(code))
                if c:
                    out.append({'file': f, 'line': n, 'col': c[0], 'a': c[1], 'b': '0',
                                'text': st})
                continue
            if OPS == 'relaxed':
                c = relaxed_order(code)
                if c:
                    out.append({'file': f, 'line': n, 'col': c[0], 'a': c[1], 'b': c[2],
                                'text': st})
                continue
            if OPS in ('ternary', 'swap'):
                c = ternary_arms(code) if OPS == 'ternary' else call_arguments(code)
                if c:
                    out.append({'file': f, 'line': n, 'col': c[0], 'a': c[1], 'b': c[2],
                                'text': st})
                continue
            if isinstance(OPS, tuple):
                pattern, group, changed = OPS
                m = pattern.search(mask_hints(code))
                if m:
                    a = m.group(group)
                    out.append({'file': f, 'line': n, 'col': m.start(group), 'a': a,
                                'b': changed(a), 'text': st})
                continue
            if OPS == 'order':
                # this line's statement and the next line's, both standing
                # alone at one indent, swapped (the next line's edit in
                # `more`); lines[] is 0-based, n counts from 1
                nxt = lines[n] if n < len(lines) else ''
                c, d = code.strip(), nxt.split('/*')[0].strip()
                indent = len(code) - len(code.lstrip())
                if (before.endswith((';', '{', '}', ')', ':', 'else')) and c != d
                        and nxt.startswith(code[:indent]) and nxt[indent:indent + 1] not in ' \t'
                        and all(standalone(x) for x in (c, d))):
                    out.append({'file': f, 'line': n, 'col': indent, 'a': c, 'b': d,
                                'text': st, 'more': [[n + 1, indent, d, c]]})
                continue
            if OPS is None:
                # a statement of its own: the line before ends one (or opens
                # a block, or is the head of an if, a loop or a label)
                c = code.strip()
                if before.endswith((';', '{', '}', ')', ':', 'else')) and standalone(c):
                    out.append({'file': f, 'line': n, 'col': code.index(c), 'a': c,
                                'b': '(void)0;', 'text': st})
                continue
            for a, b in OPS:
                if a in code:
                    out.append({'file': f, 'line': n, 'col': code.index(a), 'a': a, 'b': b, 'text': st})
                    break
    return out


def comment_lines(text):
    """Numbers of the lines that lie wholly inside a block comment, including
    those of a comment opened after code (which mutants() takes for code: it
    is left as it is so that a seed keeps drawing the same mutants)."""
    out, inside = set(), False
    for n, line in enumerate(text.split('\n'), 1):
        if inside:
            out.add(n)
            inside = '*/' not in line
            continue
        k = line.rfind('/*')
        inside = k >= 0 and '*/' not in line[k:]
    return out


def code_digests(build):
    """A digest of the code of each object file under build: every
    section but the debugging ones and the compiler's comment. A mutant
    whose objects all keep their digests compiled to the very code of the
    original (most of set 41's: a type made signed where C converts it
    back to unsigned): it is equivalent, for this compiler and these
    options, and no test could tell it (trivial compiler equivalence)."""
    out = {}
    with tempfile.TemporaryDirectory() as tmp:
        for d, _, names in os.walk(build):
            for n in sorted(names):
                if n.endswith('.o'):
                    path, stripped = os.path.join(d, n), os.path.join(tmp, 'o')
                    subprocess.run(['objcopy', '--strip-debug', '--remove-section=.comment',
                                    path, stripped], check=True, capture_output=True)
                    out[path] = hashlib.sha256(open(stripped, 'rb').read()).hexdigest()
    return out


def main():
    count = int(sys.argv[1]) if len(sys.argv) > 1 else 69
    seed = int(sys.argv[2]) if len(sys.argv) > 2 else 28
    start = int(sys.argv[3]) if len(sys.argv) > 3 else 0
    # every suite but `big` takes ~20 s here (`big` 90 to 120): a mutant
    # still running after the limit (TW_MUTANT_TIMEOUT seconds, 240 unless
    # set) is taken for a hang
    limit = int(os.environ.get('TW_MUTANT_TIMEOUT', '240'))
    global OPS, FILES
    sets = [int(s) for s in (sys.argv[4] if len(sys.argv) > 4 else '1').split(',')]
    tsan = [s for s in sets if SETS[s] in ('relaxed', 'unlock')]
    if tsan and len(tsan) != len(sets):
        sys.exit('mutants.py: sets 36 and 37 build for ThreadSanitizer: list them apart')
    OPS = SETS[sets[0]]
    # TW_MUTANT_LINES: only the candidates on these lines (file:line,
    # comma-separated), e.g. a wider set's survivors tried again narrower;
    # file:line:col names one candidate of a line that has two (the column
    # as printed, counted from 1)
    only = set(filter(None, os.environ.get('TW_MUTANT_LINES', '').split(',')))
    files = os.environ.get('TW_MUTANT_FILES', '')
    # TW_MUTANT_SKIP: more suites to leave out, comma-separated: `big`
    # (90 to 120 s here, keys of 2 and 4 GiB copied and hashed) where
    # the lines drawn hold no key's length
    skip = [a for x in filter(None, os.environ.get('TW_MUTANT_SKIP', '').split(','))
            for a in ('--no-suite', x)]
    if files:
        FILES = {'rest': REST, 'headers': HEADERS}.get(files) or files.split(',')
    top = subprocess.run(['git', 'rev-parse', '--show-toplevel'], capture_output=True,
                         text=True, check=True).stdout.strip()
    tmp = tempfile.mkdtemp(prefix='twheel-mutants.')
    tree, build = os.path.join(tmp, 'tree'), os.path.join(tmp, 'build')
    subprocess.run(['git', '-C', top, 'worktree', 'add', '-q', '--detach', tree, 'HEAD'], check=True)
    try:
        setup, env = ['meson', 'setup', build, tree, '-Dbenchmarks=false'], dict(os.environ)
        # TW_MUTANT_SETUP: more meson options, space-separated, e.g.
        # -Dc_args=-U__linux__ for the paths for other systems (CI's stage)
        setup += os.environ.get('TW_MUTANT_SETUP', '').split()
        if OPS in ('relaxed', 'unlock'):  # as CI's ThreadSanitizer stage builds and runs
            setup += ['-Db_sanitize=thread', '-Db_lundef=false']
            env.update(CC='clang', TSAN_OPTIONS='halt_on_error=1:second_deadlock_stack=1',
                       TW_TEST_SLOW='1')
        subprocess.run(setup, check=True, capture_output=True, env=env)
        subprocess.run(['ninja', '-C', build], check=True, capture_output=True)
        # TW_MUTANT_TCE=0: run the suites even on a mutant that compiles to
        # the original's code (code_digests)
        tce = os.environ.get('TW_MUTANT_TCE', '1') != '0'
        original = code_digests(build) if tce else None
        ms = []
        for s in sets:  # each set shuffled as a run of it alone shuffles it
            OPS = SETS[s]
            drawn = mutants(tree)
            if only:
                drawn = [m for m in drawn if '%s:%d' % (m['file'], m['line']) in only
                         or '%s:%d:%d' % (m['file'], m['line'], m['col'] + 1) in only]
            random.seed(seed)
            random.shuffle(drawn)
            ms += [dict(m, set=s) for m in drawn]
        tally = {}
        for k, m in enumerate(ms[start:start + count], start):
            path = os.path.join(tree, m['file'])
            if m['line'] in comment_lines(open(path).read()):
                tally['comment'] = tally.get('comment', 0) + 1
                print('%d\t%scomment\t%s:%d\t(not code: skipped)' % (
                          k, 'set %d\t' % m['set'] if len(sets) > 1 else '', m['file'], m['line']),
                      flush=True)
                continue
            # an edit of `more` may name another file (set 38's prototypes)
            edits = [[m['line'], m['col'], m['a'], m['b'], m['file']]] + \
                [e + [m['file']] if len(e) == 4 else e for e in m.get('more', [])]
            touched = sorted(set(e[4] for e in edits))
            for f in touched:
                lines = open(os.path.join(tree, f)).read().split('\n')
                # every edit of a line from its right end, so columns stand
                for n, col, a, b, _ in sorted((e for e in edits if e[4] == f), reverse=True):
                    l = lines[n - 1]
                    assert l[col:col + len(a)] == a, (m, f, n)
                    lines[n - 1] = l[:col] + b + l[col + len(a):]
                open(os.path.join(tree, f), 'w').write('\n'.join(lines))
            t0 = time.time()
            if subprocess.run(['ninja', '-C', build], capture_output=True).returncode:
                res = 'nocompile'
            elif tce and code_digests(build) == original:
                res = 'same-code'
            else:
                try:
                    r = subprocess.run(['meson', 'test', '-C', build, '--no-rebuild', '--no-suite',
                                        'install', '--no-suite', 'docs'] + skip,
                                       capture_output=True, timeout=limit, env=env)
                    res = 'killed' if r.returncode else 'SURVIVED'
                except subprocess.TimeoutExpired:
                    res = 'killed(timeout)'
                    # SIGKILL: a hung test may block SIGTERM in every thread
                    # (the library's threads block it, and a test's main
                    # thread may too), and would live on, asleep, for good
                    subprocess.run(['pkill', '-KILL', '-f', os.path.join(build, 'tests') + '/'])
            subprocess.run(['git', '-C', tree, 'checkout', '-q', '--'] + touched, check=True)
            tally[res] = tally.get(res, 0) + 1
            also = ''.join(',%s%d' % (e[4] + ':' if len(e) > 4 else '', e[0])
                           for e in m.get('more', []))
            which = 'set %d\t' % m['set'] if len(sets) > 1 else ''
            # the column too: a line may hold two candidates of one set
            print('%d\t%s%s\t%s:%d:%d%s\t%r -> %r\t%s\t%.0fs' % (
                      k, which, res, m['file'], m['line'], m['col'] + 1, also, m['a'], m['b'],
                      m['text'], time.time() - t0),
                  flush=True)
        print(json.dumps(tally))
    finally:
        subprocess.run(['git', '-C', top, 'worktree', 'remove', '--force', tree])
        subprocess.run(['rm', '-rf', tmp])


if __name__ == '__main__':
    main()
