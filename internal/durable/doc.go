// Package durable writes a file so that a crash of the process or a power
// loss leaves at its path either the old file or the new one, never a mix,
// and so that once a write has returned, the new one survives a power loss.
// It is the module's one implementation of the temporary file, fsync,
// rename, directory fsync sequence.
//
// # The steps, and what a crash at each leaves
//
// WriteFile (and Create, Writer.Write, Writer.Commit, which stream the same
// steps) writes path in this order:
//
//  1. create a temporary file, mode 0600, named "." + the base name of path
//     + ".tmp-" + random digits (IsTemp reports such names), beside path or
//     in the TempDir option's directory (which must be on path's file
//     system);
//  2. set its mode to perm (exactly: the umask does not apply);
//  3. write the data;
//  4. fsync the temporary file;
//  5. close it;
//  6. rename it over path (with Exclusive: link it at path, which fails if
//     path exists, and remove the temporary name);
//  7. fsync path's directory.
//
// A crash of the process (the kernel and its page cache survive) before
// step 6 leaves path as it was: the old file, or none; a temporary file may
// remain, under a hidden name no reader of path opens, and that IsTemp lets
// a reader of a whole directory skip and a cleaner remove. From step 6 on,
// path is the new file, whole. No reader ever sees a file that is partly
// old and partly new, or partly written: the rename replaces one whole
// file by another.
//
// A power loss before step 7 has returned may lose the rename: path is then
// the old file (or none), never a new name over empty or torn contents,
// since the data was fsynced before the rename (the zero-length files some
// file systems leave after a rename without an fsync). Once WriteFile
// returns nil, the new file survives a power loss. With DeferDirSync, that
// holds only once the caller's SyncDir of the directory has returned.
//
// With NoSync, steps 4 and 7 are skipped: the replacement is still atomic
// against a crash of the process, but a power loss may leave the old file,
// or, on some file systems, a new file that is empty or short. It is for
// files whose loss costs nothing and whose readers refuse a torn file.
//
// # Errors
//
// Every error names path, and the temporary file or the directory when that
// is what failed, and wraps the system's error (errors.Is works with
// syscall.ENOSPC, syscall.EROFS, fs.ErrPermission, fs.ErrExist).
//
//   - A full disk fails the write or, with delayed allocation, only the
//     fsync of step 4: the temporary file is removed and path is left as it
//     was. A failed fsync is never retried on the same file (Linux may have
//     dropped the pages it could not write); a later WriteFile starts
//     again with a new temporary file.
//   - A read-only directory or file system fails step 1: nothing is
//     created and path is left as it was.
//   - A failure of step 7 comes after the rename: path is the new file,
//     but it may not survive a power loss. Writing again is safe.
//   - With Exclusive, an existing path is not replaced: the error wraps
//     fs.ErrExist, the new data is discarded, and the directory is still
//     fsynced, so the file the caller then reads is durable too.
//
// Writes to different paths are independent. Two writes to one path each
// use their own temporary file; the last rename wins (with Exclusive, the
// first link).
//
// # Tests
//
// The package writes through an FS, the operating system's unless a test
// installs another with SetFS; package durabletest records the operations
// (to assert their order) and kills a child process between them (to show
// what a crash leaves). Product code never calls SetFS.
package durable
