#!/bin/sh
# Installs the build into a temporary DESTDIR, then compiles and runs a
# small program against it using only `pkg-config --cflags --libs twheel`.
set -eu
build="$1"; src="$2"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
meson install -C "$build" --destdir "$tmp" --no-rebuild --quiet
pcdir=$(dirname "$(find "$tmp" -name twheel.pc | head -n 1)")
[ -f "$pcdir/twheel.pc" ] || { echo "twheel.pc not installed"; exit 1; }
export PKG_CONFIG_PATH="$pcdir" PKG_CONFIG_SYSROOT_DIR="$tmp"
flags=$(pkg-config --cflags --libs twheel)
echo "pkg-config: $flags"
${CC:-cc} -std=c11 -Wall -Wextra -pedantic -Werror -o "$tmp/consumer" "$src" $flags
libdir=$(pkg-config --libs-only-L twheel | sed 's/^ *-L//; s/ *$//')
out=$(LD_LIBRARY_PATH="$libdir" "$tmp/consumer")
echo "$out"
# the same program as C++: the headers compile there and their functions
# link (a header without extern "C" fails here on the mangled names)
cxx=
for c in ${CXX:-} c++ clang++ g++; do
  if command -v "$c" >/dev/null 2>&1; then cxx=$c; break; fi
done
if [ -n "$cxx" ]; then
  $cxx -x c++ -std=c++11 -Wall -Wextra -pedantic -Werror -o "$tmp/consumer++" "$src" $flags
  LD_LIBRARY_PATH="$libdir" "$tmp/consumer++" >/dev/null
  echo "ok: the headers compile and link as C++ ($cxx)"
else
  echo "no C++ compiler: the C++ check is skipped"
fi
# the static library: the same program linked against libtwheel.a with
# `pkg-config --static` (Libs.private must name what the archive needs),
# libc left shared; it must not load libtwheel.so. Then the same by the
# other compiler (gcc's archive by clang, clang's by gcc), as a user of
# an installed libtwheel.a may: an LTO build's slim objects, which hold
# no machine code, fail there (meson.build asks gcc for fat ones).
static_libs=$(pkg-config --static --libs twheel | sed 's/-ltwheel\b/-l:libtwheel.a/')
case "$static_libs" in *-l:libtwheel.a*) ;; *) echo "no -ltwheel in: $static_libs"; exit 1;; esac
ccver=$(${CC:-cc} --version 2>/dev/null | head -n 1)
case "$ccver" in *clang*) other=gcc ;; *) other=clang ;; esac
static_link() { # compiler, output
  $1 -std=c11 -Wall -Wextra -pedantic -Werror -o "$2" "$src" \
    $(pkg-config --cflags twheel) $static_libs
  if readelf -d "$2" | grep -q 'NEEDED.*libtwheel'; then
    echo "the static link by $1 still needs libtwheel.so"; exit 1
  fi
  "$2" | grep -q "a threaded timer fired 1" ||
    { echo "the program $1 linked statically failed"; exit 1; }
}
archive="$libdir/libtwheel.a"
magic=$(ar p "$archive" "$(ar t "$archive" | head -n 1)" | head -c 4 | od -An -tx1 | tr -d ' \n')
if [ "$magic" = 4243c0de ]; then
  # LLVM bitcode: a clang LTO build (clang before 17 makes no fat
  # objects), which only a linker with LLVM's LTO (lld, or gold with its
  # plugin) reads, not the default ld.bfd, and no gcc: linked by clang
  # through lld where it is installed, else said and skipped
  case "$ccver" in
  *clang*) if command -v ld.lld >/dev/null 2>&1; then
             static_link "${CC:-cc} -flto -fuse-ld=lld" "$tmp/consumer-static"
             echo "ok: libtwheel.a (LLVM bitcode) links statically with clang -flto -fuse-ld=lld"
           else
             echo "libtwheel.a holds LLVM bitcode and ld.lld is missing: the static links are skipped"
           fi ;;
  *) echo "libtwheel.a holds LLVM bitcode but \$CC is not clang: the static links are skipped" ;;
  esac
else
  static_link "${CC:-cc}" "$tmp/consumer-static"
  echo "ok: links statically with pkg-config --static ($static_libs)"
  if command -v "$other" >/dev/null 2>&1; then
    static_link "$other" "$tmp/consumer-other"
    echo "ok: links statically into a program built by $other"
  else
    echo "no $other: the static link by the other compiler is skipped"
  fi
fi
# a CMake project finds it the way CMake reads a .pc file
# (FindPkgConfig's imported target), with the same environment
if command -v cmake >/dev/null 2>&1; then
  mkdir "$tmp/cmake-src"
  cp "$src" "$tmp/cmake-src/consumer.c"
  cat > "$tmp/cmake-src/CMakeLists.txt" <<'CMAKE'
cmake_minimum_required(VERSION 3.13)
project(consumer C)
find_package(PkgConfig REQUIRED)
pkg_check_modules(TWHEEL REQUIRED IMPORTED_TARGET twheel)
add_executable(consumer consumer.c)
set_property(TARGET consumer PROPERTY C_STANDARD 11)
target_compile_options(consumer PRIVATE -Wall -Wextra -pedantic -Werror)
target_link_libraries(consumer PRIVATE PkgConfig::TWHEEL)
CMAKE
  CC="${CC:-cc}" cmake -S "$tmp/cmake-src" -B "$tmp/cmake-build" > "$tmp/cmake.log" 2>&1 &&
    cmake --build "$tmp/cmake-build" >> "$tmp/cmake.log" 2>&1 ||
    { cat "$tmp/cmake.log"; echo "the CMake project did not build"; exit 1; }
  LD_LIBRARY_PATH="$libdir" "$tmp/cmake-build/consumer" | grep -q "a threaded timer fired 1" ||
    { echo "the program CMake built failed"; exit 1; }
  echo "ok: a CMake project links it through pkg_check_modules(... IMPORTED_TARGET twheel)"
else
  echo "no cmake: the CMake project is skipped"
fi
# pkg-config, the headers and the library agree on the version
echo "$out" | grep -qx "consumer: version $(pkg-config --modversion twheel)" ||
  { echo "version differs from pkg-config's $(pkg-config --modversion twheel)"; exit 1; }
# the SONAME is versioned
readelf -d "$libdir/libtwheel.so" | grep -q 'SONAME.*libtwheel\.so\.1'
echo "ok: installed, found by pkg-config, SONAME libtwheel.so.1"
# with symbol versions (src/twheel.map), the program records the one it
# needs, which the loader checks at start
if readelf -V "$libdir/libtwheel.so" | grep -q 'Version definition'; then
  need=$(readelf -W --dyn-syms "$tmp/consumer" | grep -o 'tw_create@TWHEEL_[0-9.]*' | head -n 1)
  [ -n "$need" ] || { echo "the program binds tw_create at no version"; exit 1; }
  echo "ok: the program binds $need"
fi
