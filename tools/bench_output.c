/* Outputs of `zgate bench`: a JSON file with every measurement, and a PNG chart (achieved
 * GB/s against the ceiling of the same run, per configuration, one panel per backend) drawn
 * by gnuplot from a data file and a script written next to the PNG. */
#define _POSIX_C_SOURCE 200809L /* clock_gettime, isatty, access under -std=c11 */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench.h"

static void json_str(FILE *f, const char *s) {
  fputc('"', f);
  for (; *s; s++) {
    if (*s == '"' || *s == '\\') fputc('\\', f), fputc(*s, f);
    else if ((unsigned char)*s < 0x20) fprintf(f, "\\u%04x", (unsigned char)*s);
    else fputc(*s, f);
  }
  fputc('"', f);
}

static void json_num(FILE *f, double v) {
  if (v != v || v > 1e300 || v < -1e300) fputs("null", f);
  else fprintf(f, "%.6g", v);
}

int cli_bench_write_json(const char *path, const bench_result *r, int n, const bench_meta *m) {
  FILE *f = fopen(path, "w");
  if (!f) return -1;
  fprintf(f, "{\n  \"tool\": \"zgate bench\",\n  \"zgate_version\": ");
  json_str(f, zgate_version());
  fprintf(f, ",\n  \"build\": ");
  json_str(f, zgate_build_info());
  fprintf(f, ",\n  \"date\": ");
  json_str(f, m->date);
  fprintf(f, ",\n  \"cpu_threads\": %d,\n  \"ceiling\": {\"cpu\": ", m->threads);
  json_str(f, m->ceiling_cpu);
  fprintf(f, ", \"cuda\": ");
  json_str(f, m->ceiling_cuda);
  fprintf(f, "},\n  \"bytes_counted\": \"bytes read plus bytes written by the operator, once each\",\n");
  fprintf(f, "  \"results\": [");
  for (int i = 0; i < n; i++) {
    const bench_result *x = &r[i];
    fprintf(f, "%s\n    {\"backend\": ", i ? "," : "");
    json_str(f, x->backend);
    fprintf(f, ", \"op\": \"%s\", \"shape\": [%lld, %lld, %lld, %lld], \"dtypes\": {", x->op,
            (long long)x->shape[0], (long long)x->shape[1], (long long)x->shape[2], (long long)x->shape[3]);
    for (int t = 0; t < CLI_NT; t++) fprintf(f, "%s\"%s\": \"%s\"", t ? ", " : "", cli_tensor_names[t], cli_dtype_name(x->dt.t[t]));
    fprintf(f, "}, \"layout\": \"%s\", \"elements\": %lld, \"bytes\": %.0f, \"repeats\": %d, \"threads\": %d",
            cli_layout_names[x->layout], (long long)x->elements, x->bytes, x->repeats, x->threads);
    if (x->error[0]) {
      fprintf(f, ", \"error\": ");
      json_str(f, x->error);
      fputc('}', f);
      continue;
    }
    fprintf(f, ",\n     \"median_us\": ");
    json_num(f, x->median_s * 1e6);
    fprintf(f, ", \"min_us\": ");
    json_num(f, x->min_s * 1e6);
    fprintf(f, ", \"first_call_us\": ");
    json_num(f, x->first_s * 1e6);
    fprintf(f, ", \"gbps\": ");
    json_num(f, x->gbps);
    fprintf(f, ", \"ceiling_gbps\": ");
    json_num(f, x->ceiling_gbps);
    fprintf(f, ", \"ceiling_median_us\": ");
    json_num(f, x->ceiling_median_s * 1e6);
    fprintf(f, ", \"pct_of_ceiling\": ");
    json_num(f, x->pct);
    fputc('}', f);
  }
  fprintf(f, "\n  ]\n}\n");
  int bad = ferror(f);
  return (fclose(f) || bad) ? -1 : 0;
}

/* The gnuplot executable on PATH, or NULL. */
static char *find_gnuplot(void) {
  const char *path = getenv("PATH");
  if (!path) path = "/usr/bin:/bin";
  while (*path) {
    const char *end = strchr(path, ':');
    size_t n = end ? (size_t)(end - path) : strlen(path);
    char *cand = malloc(n + 10);
    if (!cand) return NULL;
    memcpy(cand, n ? path : ".", n ? n : 1);
    strcpy(cand + (n ? n : 1), "/gnuplot");
    if (access(cand, X_OK) == 0) return cand;
    free(cand);
    path = end ? end + 1 : path + n;
  }
  return NULL;
}

/* A path safe to put between single quotes in a shell command and a gnuplot string. */
static int quotable(const char *s) {
  for (; *s; s++)
    if (*s == '\'' || *s == '"' || *s == '\n' || *s == '\\') return 0;
  return 1;
}

int cli_bench_plot(const char *png_path, const bench_result *r, int n, const bench_meta *m) {
  if (!quotable(png_path)) {
    cli_error("bench", "the chart path '%s' contains quotes or backslashes; choose another --png", png_path);
    return -1;
  }
  size_t len = strlen(png_path);
  char *base = malloc(len + 8);
  if (!base) return -1;
  memcpy(base, png_path, len + 1);
  if (len > 4 && !strcmp(base + len - 4, ".png")) base[len - 4] = '\0';
  char *dat = malloc(len + 8), *gp = malloc(len + 8);
  if (!dat || !gp) {
    free(base), free(dat), free(gp);
    return -1;
  }
  sprintf(dat, "%s.dat", base);
  sprintf(gp, "%s.gp", base);

  /* One data block per backend (gnuplot's "index"), in order of first appearance. */
  const char *panels[CLI_MAX_BACKENDS];
  int npanels = 0, maxrows = 0;
  for (int i = 0; i < n; i++) {
    int seen = 0;
    for (int k = 0; k < npanels; k++) seen |= !strcmp(panels[k], r[i].backend);
    if (!seen && npanels < CLI_MAX_BACKENDS) panels[npanels++] = r[i].backend;
  }
  FILE *f = fopen(dat, "w");
  if (!f) {
    cli_error("bench", "cannot write '%s'", dat);
    free(base), free(dat), free(gp);
    return -1;
  }
  fprintf(f, "# zgate bench: label, achieved GB/s, ceiling GB/s, percent of ceiling\n");
  for (int k = 0; k < npanels; k++) {
    int rows = 0;
    fprintf(f, "# %s\n", panels[k]);
    for (int i = 0; i < n; i++) {
      if (strcmp(r[i].backend, panels[k]) || r[i].error[0]) continue;
      char dts[64];
      cli_dtypes_str(&r[i].dt, dts, sizeof dts);
      if (strchr(dts, ' ')) snprintf(dts, sizeof dts, "mixed");
      fprintf(f, "\"%s %s %s %lldx%lldx%lldx%lld\" %.4g %.4g %.4g\n", r[i].op, dts, cli_layout_names[r[i].layout],
              (long long)r[i].shape[0], (long long)r[i].shape[1], (long long)r[i].shape[2], (long long)r[i].shape[3],
              r[i].gbps, r[i].ceiling_gbps, r[i].pct);
      rows++;
    }
    if (rows > maxrows) maxrows = rows;
    fprintf(f, "\n\n");
  }
  fclose(f);

  f = fopen(gp, "w");
  if (!f) {
    cli_error("bench", "cannot write '%s'", gp);
    free(base), free(dat), free(gp);
    return -1;
  }
  int width = 360 + 95 * (maxrows > 4 ? maxrows : 4);
  if (width > 2400) width = 2400;
  fprintf(f, "# gnuplot script written by 'zgate bench'; run: gnuplot '%s'\n", gp);
  fprintf(f, "set terminal pngcairo size %d,%d font 'DejaVu Sans,10' noenhanced\n", width, 140 + 420 * npanels);
  fprintf(f, "set output '%s'\n", png_path);
  fprintf(f, "set multiplot layout %d,1 title 'zgate %s: achieved bandwidth vs the ceiling measured in the same run (%s)'\n",
          npanels > 0 ? npanels : 1, zgate_version(), m->date);
  fprintf(f, "set style fill solid 0.9 border rgb '#333333'\nset boxwidth 0.38\nset grid ytics lc rgb '#dddddd'\n");
  fprintf(f, "set ylabel 'GB/s (bytes read + written)'\nset yrange [0:*]\nset offsets 0.6, 0.6, 0, 0\n");
  fprintf(f, "set xtics rotate by 25 right nomirror font ',9'\nset key top left opaque box\nset bmargin 8\nset lmargin 16\n");
  for (int k = 0; k < npanels; k++) {
    int is_cuda = !strncmp(panels[k], "cuda", 4);
    if (is_cuda) fprintf(f, "set title '%s (ceiling: %s)'\n", panels[k], m->ceiling_cuda);
    else fprintf(f, "set title '%s, %d threads (ceiling: %s)'\n", panels[k], m->threads, m->ceiling_cpu);
    fprintf(f,
            "plot '%s' index %d using ($0-0.2):2 with boxes lc rgb '#2b6cb0' title 'zgate', \\\n"
            "     '' index %d using ($0+0.2):3 with boxes lc rgb '#c8c8c8' title 'ceiling', \\\n"
            "     '' index %d using ($0-0.2):2:(sprintf('%%.0f%%%%', $4)) with labels offset 0,0.7 font ',9' notitle, \\\n"
            "     '' index %d using 0:(0):xtic(1) with points ps 0 notitle\n",
            dat, k, k, k, k);
  }
  fprintf(f, "unset multiplot\n");
  fclose(f);

  int rc;
  char *gnuplot = find_gnuplot();
  if (!gnuplot) {
    fprintf(stderr, "zgate bench: gnuplot not found, so no chart was drawn; wrote %s and %s "
                    "(install gnuplot-nox, then run: gnuplot '%s')\n", dat, gp, gp);
    rc = 1;
  } else if (!quotable(gnuplot)) {
    fprintf(stderr, "zgate bench: cannot run gnuplot from '%s'\n", gnuplot);
    rc = -1;
  } else {
    size_t cl = strlen(gnuplot) + strlen(gp) + 32;
    char *cmdline = malloc(cl);
    rc = -1;
    if (cmdline) {
      snprintf(cmdline, cl, "'%s' '%s'", gnuplot, gp);
      int st = system(cmdline);
      if (st == 0 && access(png_path, R_OK) == 0) rc = 0;
      else fprintf(stderr, "zgate bench: gnuplot failed on %s (exit status %d); the data is in %s\n", gp, st, dat);
      free(cmdline);
    }
  }
  free(gnuplot), free(base), free(dat), free(gp);
  return rc;
}
