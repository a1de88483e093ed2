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
