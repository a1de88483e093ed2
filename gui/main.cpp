// pipetune-gui (scaffold; the main window lands in gui/app/).
#include <QApplication>
#include <QMainWindow>

int main(int argc, char** argv) {
  QApplication app(argc, argv);
  QMainWindow window;
  window.setWindowTitle("pipetune");
  window.show();
  return app.exec();
}
