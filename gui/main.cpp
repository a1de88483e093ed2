// pipetune-gui [WORKSPACE.db]: the desktop workbench (gui/app/main_window.hpp). Runs and
// searches are stored in WORKSPACE.db (default pipetune.db, as the CLI's --db).
#include <QApplication>
#include <QCommandLineParser>
#include <cstdio>

#include "engine/tensor/cpu/openblas_library.hpp"
#include "gui/app/main_window.hpp"

int main(int argc, char** argv) {
  pipetune::tensor::set_openblas_thread_timeout();  // before Qt starts its threads
  QApplication app(argc, argv);
  QApplication::setApplicationName("pipetune-gui");
  QCommandLineParser parser;
  parser.setApplicationDescription("pipetune: plan, train, tune and inspect pipeline training");
  parser.addHelpOption();
  parser.addPositionalArgument("workspace", "Workspace database (default: pipetune.db)",
                               "[WORKSPACE.db]");
  parser.process(app);
  const QStringList args = parser.positionalArguments();
  if (args.size() > 1) {
    std::fprintf(stderr, "pipetune-gui: one workspace at most (got %lld)\n",
                 static_cast<long long>(args.size()));
    return 2;
  }
  pipetune::gui::MainWindow window(args.isEmpty() ? QString("pipetune.db") : args.front());
  window.show();
  return app.exec();
}
