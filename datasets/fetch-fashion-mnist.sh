#!/usr/bin/env bash
# fetch-fashion-mnist.sh - puts the four Fashion-MNIST files into datasets/fashion-mnist (or the
# folder given as $1) on machines without the Debian package that installs
# /usr/share/datasets/fashion-mnist. Files already there are checked, not fetched again.
#
# The checksums are SHA-256 of the uncompressed IDX files, not of the .gz: copies of the official
# archives differ only in their gzip headers (stored file name and time), so their .gz checksums
# differ while the data is the same. These match the published uncompressed MD5s
# (f4a8712d..., 9018921c..., 8181f547..., 15d48437...).
set -euo pipefail

base_url=http://fashion-mnist.s3-website.eu-central-1.amazonaws.com
dest=${1:-"$(cd "$(dirname "$0")" && pwd)/fashion-mnist"}

# A function rather than an associative array: macOS still ships bash 3.
expected_sha256() {
    case $1 in
    train-images-idx3-ubyte) echo c59f468a2f672dc815687fe0f83887768d799fd8a3f3276145d20f83aa44d888 ;;
    train-labels-idx1-ubyte) echo bad3541b69d912435c50bb6ba87bec294ff4f6a2e1246121d8633921760443d9 ;;
    t10k-images-idx3-ubyte) echo 5b4141f0afbad91edebe8549f8fcffe087ea10ca49f1dbef5c9a5cd8815ce37b ;;
    t10k-labels-idx1-ubyte) echo 0402a96d92fd2663957122ceb108a494c5af83dab82d92729df917d7dec38c34 ;;
    esac
}

die() {
    echo "fetch-fashion-mnist: $*" >&2
    exit 1
}

sha256_of_stdin() {
    if command -v sha256sum >/dev/null; then
        sha256sum | cut -d' ' -f1
    elif command -v shasum >/dev/null; then
        shasum -a 256 | cut -d' ' -f1
    else
        die "neither sha256sum nor shasum is installed"
    fi
}

# Prints the SHA-256 of a file's uncompressed content; gzip is told by its magic bytes.
content_sha256() {
    if [ "$(head -c 2 "$1" | od -An -tx1 | tr -d ' \n')" = 1f8b ]; then
        gzip -dc "$1" | sha256_of_stdin
    else
        sha256_of_stdin <"$1"
    fi
}

verify() { # file name
    local got want
    want=$(expected_sha256 "$2")
    if ! got=$(content_sha256 "$1"); then
        echo "fetch-fashion-mnist: $1: cannot read it (a damaged gzip file?)" >&2
        return 1
    fi
    if [ "$got" != "$want" ]; then
        echo "fetch-fashion-mnist: $1: SHA-256 of the content is $got, expected $want" >&2
        return 1
    fi
}

download() { # url file
    if command -v curl >/dev/null; then
        curl -fsSL --retry 3 -o "$2" "$1"
    elif command -v wget >/dev/null; then
        wget -q -O "$2" "$1"
    else
        die "neither curl nor wget is installed"
    fi
}

mkdir -p "$dest" || die "$dest: cannot create the folder"
for name in train-images-idx3-ubyte train-labels-idx1-ubyte t10k-images-idx3-ubyte \
    t10k-labels-idx1-ubyte; do
    if [ -f "$dest/$name.gz" ]; then
        verify "$dest/$name.gz" "$name" || die "$dest/$name.gz is damaged: delete it and run again"
    elif [ -f "$dest/$name" ]; then
        verify "$dest/$name" "$name" || die "$dest/$name is damaged: delete it and run again"
    else
        part=$dest/$name.gz.part
        echo "fetching $base_url/$name.gz"
        if ! download "$base_url/$name.gz" "$part" || ! verify "$part" "$name"; then
            rm -f "$part"
            die "$base_url/$name.gz: download failed or did not match its checksum"
        fi
        mv "$part" "$dest/$name.gz"
    fi
    echo "ok $name"
done
echo "Fashion-MNIST is in $dest"
