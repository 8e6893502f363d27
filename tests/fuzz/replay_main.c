/* Runs the fuzz target once on each file named (or each file in each directory named):
 * the seed corpus as a plain regression test, without libFuzzer (e.g. built with gcc). */
#define _POSIX_C_SOURCE 200809L /* posix_memalign, strnlen */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int run_file(const char *path) {
  FILE *f = fopen(path, "rb");
  if (!f) { perror(path); return 1; }
  uint8_t buf[1 << 16];
  size_t n = fread(buf, 1, sizeof buf, f);
  fclose(f);
  uint8_t *copy = malloc(n + 1); /* exactly sized, as libFuzzer hands it over */
  memcpy(copy, buf, n);
  LLVMFuzzerTestOneInput(copy, n);
  free(copy);
  return 0;
}

int main(int argc, char **argv) {
  int files = 0, errors = 0;
  for (int i = 1; i < argc; i++) {
    struct stat sb;
    if (stat(argv[i], &sb) != 0) { perror(argv[i]); errors++; continue; }
    if (!S_ISDIR(sb.st_mode)) { errors += run_file(argv[i]); files++; continue; }
    DIR *d = opendir(argv[i]);
    struct dirent *e;
    while (d && (e = readdir(d))) {
      if (e->d_name[0] == '.') continue;
      char path[4096];
      snprintf(path, sizeof path, "%s/%s", argv[i], e->d_name);
      errors += run_file(path);
      files++;
    }
    if (d) closedir(d);
  }
  printf("replayed %d inputs, %d unreadable\n", files, errors);
  return errors != 0 || files == 0;
}
