# Sourced by scripts/device_bundle and scripts/device_bundle_mpi: what both bundles do alike.

# Libraries a GPU machine has itself (ldd names): glibc's and the vDSO, CUDA's, and NCCL's (its
# own or PyTorch's wheels). An alternation for a regular expression.
bundle_machine_libs='linux-vdso|ld-linux|libc\.so|libm\.so|libmvec\.so|libpthread\.so|libdl\.so|librt\.so|libresolv\.so|libutil\.so|libanl\.so|libnsl\.so|libcuda\.so|libcudart\.so|libcublas\.so|libcublasLt\.so|libcupti\.so|libnccl\.so|libnvrtc|libnvToolsExt|libnvJitLink'

# bundle_ignore FOLDER...: /FOLDER/ lines in .git/info/exclude, so the folders never travel as
# untracked files (and git add -A never takes them).
bundle_ignore() {
  local exclude line
  exclude="$(git rev-parse --git-path info/exclude)"
  mkdir -p "$(dirname "$exclude")"
  touch "$exclude"
  for line in "$@"; do
    grep -qxF "/$line/" "$exclude" || echo "/$line/" >>"$exclude"
  done
}

# bundle_copy_libraries DEST SKIP HAVE BIN...: copies into DEST, once each, every library ldd
# names for the BINs, but those whose name matches the regular expression SKIP and those the
# folder HAVE already carries (as NAME or NAME.xz; HAVE may be empty), printing each copied.
# Exits 1 naming a library this machine does not have.
bundle_copy_libraries() {
  local dest="$1" skip="$2" have="$3" bin name arrow path rest
  shift 3
  declare -A copied=()
  for bin in "$@"; do
    while read -r name arrow path rest; do
      [ "$arrow" = "=>" ] || continue
      [[ "$name" =~ $skip ]] && continue
      if [ -n "$have" ] && { [ -e "$have/$name" ] || [ -e "$have/$name.xz" ]; }; then continue; fi
      if [ "$path" = "not" ]; then
        echo "$(basename "$0"): $bin needs $name, which is not found here" >&2
        exit 1
      fi
      [ -z "${copied[$name]:-}" ] || continue
      cp -L "$path" "$dest/$name"
      copied[$name]=1
      printf '   %-28s %6s  %s\n' "$name" "$(du -h "$dest/$name" | cut -f1)" "$path"
    done < <(ldd "$bin")
  done
}

# bundle_dlopened TREE: the libraries the binaries of build tree TREE open at run time (dlopen;
# ldd does not name them): each PIPETUNE_<NAME>_PATH in the tree's compile_commands.json (written
# by every generator), as "SONAME FILE" lines. Since b6ac2fd OpenBLAS, cuBLASLt, CUPTI and NCCL
# are opened that way, by the file configure found and else by their soname (which the GPU
# machine's LD_LIBRARY_PATH must then find).
bundle_dlopened() {
  grep -oE 'PIPETUNE_[A-Z0-9]+_PATH=[^ ]+' "$1/compile_commands.json" 2>/dev/null |
    sed -E 's/^[^=]*=[\\"]*//; s/[\\"]*$//' | sort -u | while read -r file; do
    echo "$(basename "$file") $file"
  done
}

# bundle_copy_dlopened DEST SKIP HAVE TREE: copies into DEST the libraries bundle_dlopened names
# for TREE (under their sonames) and those they load, but those whose name matches SKIP and those
# HAVE carries; exits 1 naming one this machine lacks, or when the tree names none (OpenBLAS is
# always among them: a tree without compile_commands.json would leave it out).
bundle_copy_dlopened() {
  local dest="$1" skip="$2" have="$3" tree="$4" soname file found=""
  while read -r soname file; do
    found=1
    [[ "$soname" =~ $skip ]] && continue
    if [ -n "$have" ] && { [ -e "$have/$soname" ] || [ -e "$have/$soname.xz" ]; }; then continue; fi
    [ -e "$file" ] || { echo "$(basename "$0"): the binaries open $file, which is not here" >&2; exit 1; }
    if [ ! -e "$dest/$soname" ]; then
      cp -L "$file" "$dest/$soname"
      printf '   %-28s %6s  %s (opened at run time)\n' "$soname" "$(du -h "$dest/$soname" | cut -f1)" "$file"
    fi
    bundle_copy_libraries "$dest" "$skip" "$have" "$file"
  done < <(bundle_dlopened "$tree")
  [ -n "$found" ] || { echo "$(basename "$0"): $tree/compile_commands.json names no library opened at run time" >&2; exit 1; }
}

# What a bundle's binaries are built from, as a git pathspec: the tree but the text they do not
# hold (Markdown, shell and Python scripts: device_check.sh and the benchmark scripts run from the
# tree on the GPU machine; scripts/ and .ci/).
bundle_built_from=(. ':(exclude,glob)**/*.md' ':(exclude,glob)**/*.sh' ':(exclude,glob)**/*.py'
                   ':(exclude)scripts' ':(exclude).ci')

# bundle_commit_line: bundle-info.txt's commit line: HEAD, and whether the working tree differs
# from it in what the binaries are built from.
bundle_commit_line() {
  echo "commit: $(git rev-parse HEAD)$(git diff --quiet HEAD -- "${bundle_built_from[@]}" 2>/dev/null ||
    echo ' + uncommitted changes')"
}

# bundle_current FOLDER: whether the bundle in FOLDER (its bundle-info.txt) was built from what the
# working tree holds now, so that a GPU session does not spend its minutes on old binaries.
# Prints one line saying which, and the files that differ; returns 0 when current, 1 when not (or
# when that cannot be told).
bundle_current() {
  local info="$1/bundle-info.txt" commit changed
  if [ ! -f "$info" ]; then
    echo "$1: no bundle (no bundle-info.txt)"
    return 1
  fi
  commit="$(sed -n 's/^commit: \([0-9a-f]\{40\}\).*/\1/p' "$info")"
  if [ -z "$commit" ] || ! git cat-file -e "$commit^{commit}" 2>/dev/null; then
    echo "$1: its commit is not in this repository ($(grep -m1 '^commit:' "$info" || echo 'none named'))"
    return 1
  fi
  if grep -q '^commit: .* + uncommitted changes' "$info"; then
    echo "$1: built from ${commit:0:7} with uncommitted changes, which cannot be compared"
    return 1
  fi
  changed="$(git diff --name-only "$commit" -- "${bundle_built_from[@]}")"
  changed+="${changed:+$'\n'}$(git ls-files --others --exclude-standard -- "${bundle_built_from[@]}" |
    sed 's/$/ (untracked)/')"
  if [ -z "$changed" ]; then
    echo "$1: current (built from ${commit:0:7}; nothing the binaries hold has changed since)"
    return 0
  fi
  echo "$1: out of date: built from ${commit:0:7}, and these changed since (rebuild it):"
  printf '%s\n' "$changed" | sed '/^$/d; s/^/  /'
  return 1
}
